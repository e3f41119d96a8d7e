package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestMemoryFlags: the memory plan comes from flags over the environment,
// a budget with a unit; an unreadable budget names where it came from.
func TestMemoryFlags(t *testing.T) {
	cfg, err := loadConfig(newFlags("serve", serveSynopsis, io.Discard), nil)
	if err != nil || cfg.Memory != settings.DefaultMemory {
		t.Fatalf("no flags: %+v %v", cfg.Memory, err)
	}
	t.Setenv("AGENTBUS_MEMORY_MODE", "large-heap")
	t.Setenv("AGENTBUS_MEMORY_BUDGET", "1GiB")
	if cfg, err = loadConfig(newFlags("serve", serveSynopsis, io.Discard), nil); err != nil || cfg.Memory != (settings.Memory{Mode: "large-heap", Budget: 1 << 30}) {
		t.Errorf("env: %+v %v", cfg.Memory, err)
	}
	if cfg, err = loadConfig(newFlags("serve", serveSynopsis, io.Discard), []string{"--memory-mode", "budget", "--memory-budget", "256MiB"}); err != nil ||
		cfg.Memory != (settings.Memory{Mode: "budget", Budget: 256 << 20}) {
		t.Errorf("flags over env: %+v %v", cfg.Memory, err)
	}
	t.Setenv("AGENTBUS_MEMORY_BUDGET", "lots")
	if _, err := loadConfig(newFlags("serve", serveSynopsis, io.Discard), nil); err == nil || !strings.Contains(err.Error(), "AGENTBUS_MEMORY_BUDGET") {
		t.Errorf("AGENTBUS_MEMORY_BUDGET=lots: %v", err)
	}
	os.Unsetenv("AGENTBUS_MEMORY_BUDGET")
	t.Setenv("AGENTBUS_MEMORY_MODE", "huge")
	if _, err := loadConfig(newFlags("serve", serveSynopsis, io.Discard), nil); err == nil || !strings.Contains(err.Error(), "memory.mode") {
		t.Errorf("AGENTBUS_MEMORY_MODE=huge: %v", err)
	}
}
