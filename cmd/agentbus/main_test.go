package main

import (
	"os"
	"strings"
	"testing"
)

// TestMain clears every AGENTBUS_* variable before the tests run: loadConfig
// reads them, and a developer's settings (AGENTBUS_NATS_URL above all) would
// otherwise send the tests' traffic to servers they did not start.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "AGENTBUS_") {
			os.Unsetenv(name)
		}
	}
	os.Exit(m.Run())
}
