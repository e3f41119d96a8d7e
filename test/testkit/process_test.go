package testkit

import (
	"slices"
	"strings"
	"testing"
)

// TestChildEnvDropsAgentbusVars: an AGENTBUS_* variable of the test's
// environment never reaches a child process; other variables do, and the
// child's operations listener takes a free port.
func TestChildEnvDropsAgentbusVars(t *testing.T) {
	t.Setenv("AGENTBUS_NATS_URL", "nats://leak.example:4222")
	t.Setenv("AGENTBUS_CONFIG", "/etc/agentbus/leak.yaml")
	t.Setenv("AGENTBUS_OPS_LISTEN", "0.0.0.0:8081")
	t.Setenv("TESTKIT_CHILD_ENV_KEEP", "kept")

	env := ProcessEnv()
	for _, kv := range env {
		if strings.HasPrefix(kv, "AGENTBUS_") && kv != "AGENTBUS_OPS_LISTEN=127.0.0.1:0" {
			t.Errorf("child env has %q", kv)
		}
	}
	if !slices.Contains(env, "AGENTBUS_OPS_LISTEN=127.0.0.1:0") {
		t.Error("child env does not move the operations listener to a free port")
	}
	if !slices.Contains(env, "TESTKIT_CHILD_ENV_KEEP=kept") {
		t.Error("child env lost TESTKIT_CHILD_ENV_KEEP")
	}
	if got := childEnv([]string{"AGENTBUS_DATA=/tmp/x"}); got == nil || len(got) != 0 {
		t.Errorf("childEnv of only AGENTBUS_ entries = %#v, want empty non-nil", got)
	}
}
