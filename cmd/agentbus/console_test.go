package main

import (
	"io"
	"strings"
	"testing"
)

// TestConsoleSwitch: the console is on by default; AGENTBUS_CONSOLE=false
// or --no-console turns it off; an unreadable value names the variable.
func TestConsoleSwitch(t *testing.T) {
	load := func(args ...string) (bool, error) {
		cfg, err := loadConfig(newFlags("serve", serveSynopsis, io.Discard), args)
		return cfg.Console.Enabled, err
	}
	if on, err := load(); !on || err != nil {
		t.Fatalf("default: %v %v", on, err)
	}
	if on, err := load("--no-console"); on || err != nil {
		t.Errorf("--no-console: %v %v", on, err)
	}
	t.Setenv("AGENTBUS_CONSOLE", "false")
	if on, err := load(); on || err != nil {
		t.Errorf("AGENTBUS_CONSOLE=false: %v %v", on, err)
	}
	t.Setenv("AGENTBUS_CONSOLE", "maybe")
	if _, err := load(); err == nil || !strings.Contains(err.Error(), "AGENTBUS_CONSOLE") {
		t.Errorf("AGENTBUS_CONSOLE=maybe: %v", err)
	}
}
