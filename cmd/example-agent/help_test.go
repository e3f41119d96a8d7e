package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/test/testkit"
)

// TestMain removes the binary TestHelp builds.
func TestMain(m *testing.M) { testkit.Main(m) }

// TestHelp runs the example-agent binary with -h and --help: it prints its
// usage and flags and exits 0, without connecting anywhere.
func TestHelp(t *testing.T) {
	bin := testkit.Build(t, "example-agent")
	for _, arg := range []string{"-h", "--help"} {
		t.Run(arg, func(t *testing.T) {
			cmd := exec.Command(bin, arg)
			cmd.Env = testkit.ProcessEnv()
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				t.Errorf("exit status %d, want 0", exit.ExitCode())
			} else if err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{"usage: example-agent", "-register", "-nats", "-agentbus", "-tenant", "-id"} {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q", w)
				}
			}
			if strings.Contains(string(out), "help requested") {
				t.Errorf("help is reported as an error")
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}
