package testkit

import (
	"slices"
	"strings"
	"testing"
)

// TestChildEnvDropsAgentbusVars: an AGENTBUS_* variable of the test's
// environment never reaches a child process; other variables do.
func TestChildEnvDropsAgentbusVars(t *testing.T) {
	t.Setenv("AGENTBUS_NATS_URL", "nats://leak.example:4222")
	t.Setenv("AGENTBUS_CONFIG", "/etc/agentbus/leak.yaml")
	t.Setenv("TESTKIT_CHILD_ENV_KEEP", "kept")

	env := ProcessEnv()
	for _, kv := range env {
		if strings.HasPrefix(kv, "AGENTBUS_") {
			t.Errorf("child env has %q", kv)
		}
	}
	if !slices.Contains(env, "TESTKIT_CHILD_ENV_KEEP=kept") {
		t.Error("child env lost TESTKIT_CHILD_ENV_KEEP")
	}
	if got := childEnv([]string{"AGENTBUS_DATA=/tmp/x"}); got == nil || len(got) != 0 {
		t.Errorf("childEnv of only AGENTBUS_ entries = %#v, want empty non-nil", got)
	}
}
