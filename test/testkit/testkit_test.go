package testkit_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/test/testkit"
)

// scaffolding are the packages for tests only, never part of a program.
var scaffolding = map[string]bool{
	"github.com/agentbus/agentbus/test/testkit":          true,
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest": true,
}

// TestImportedOnlyByTests fails when a package's non-test code imports
// testkit or natsjstest.
func TestImportedOnlyByTests(t *testing.T) {
	out, err := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/agentbus/agentbus/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, imp := range strings.Fields(imports) {
			if scaffolding[imp] {
				t.Errorf("%s imports %s outside its tests", pkg, imp)
			}
		}
	}
}

// TestFreePortNeverRepeats asks for more ports than a short run of the
// kernel's ephemeral range holds without a repeat: a port handed out twice
// would let two servers of one test clash.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 3000 {
		p := testkit.FreePort(t)
		if seen[p] {
			t.Fatalf("port %d given out twice", p)
		}
		seen[p] = true
	}
}
