package main

import (
	"os"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/test/testkit"
)

// TestMain clears every AGENTBUS_* variable before the tests run: loadConfig
// reads them, and a developer's settings (AGENTBUS_NATS_URL above all) would
// otherwise send the tests' traffic to servers they did not start. The
// binary TestHelp builds is removed at the end.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "AGENTBUS_") {
			os.Unsetenv(name)
		}
	}
	testkit.Main(m)
}
