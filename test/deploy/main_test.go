package deploy

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/test/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// repoRoot is the agentbus repository, two levels up.
var repoRoot = filepath.Join("..", "..")

// serveHelp returns `agentbus serve -h` of the binary built from this
// tree: its flags, each with the AGENTBUS_* variable it reads.
func serveHelp(t *testing.T) string {
	t.Helper()
	out, _ := exec.Command(testkit.BuildAgentbus(t), "serve", "-h").CombinedOutput()
	if !strings.Contains(string(out), "-listen") {
		t.Fatalf("agentbus serve -h lists no --listen:\n%s", out)
	}
	return string(out)
}

// hasOpsListener reports whether the binary has the operations listener
// (--ops-listen: /healthz, /readyz, /metrics).
func hasOpsListener(t *testing.T) bool {
	return strings.Contains(serveHelp(t), "-ops-listen")
}
