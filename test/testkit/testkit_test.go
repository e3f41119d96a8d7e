package testkit_test

import (
	"os/exec"
	"strings"
	"testing"
)

const importPath = "github.com/agentbus/agentbus/test/testkit"

// TestImportedOnlyByTests fails when a package's non-test code imports
// testkit: it is scaffolding for tests, never part of a program.
func TestImportedOnlyByTests(t *testing.T) {
	out, err := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/agentbus/agentbus/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, imp := range strings.Fields(imports) {
			if imp == importPath {
				t.Errorf("%s imports %s outside its tests", pkg, importPath)
			}
		}
	}
}
