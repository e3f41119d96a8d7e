package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpsMetricsSwitch: metrics are on by default; ops.metrics: false in
// the file, AGENTBUS_OPS_METRICS=false or --ops-metrics=false turns them
// off; the flag overrides the variable, which overrides the file; an
// unreadable value names the variable.
func TestOpsMetricsSwitch(t *testing.T) {
	load := func(args ...string) (bool, error) {
		cfg, err := loadConfig(newFlags("serve", serveSynopsis, io.Discard), args)
		return cfg.Ops.Metrics, err
	}
	if on, err := load(); !on || err != nil {
		t.Fatalf("default: %v %v", on, err)
	}
	if on, err := load("--ops-metrics=false"); on || err != nil {
		t.Errorf("--ops-metrics=false: %v %v", on, err)
	}
	file := filepath.Join(t.TempDir(), "agentbus.yaml")
	if err := os.WriteFile(file, []byte("ops:\n  metrics: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if on, err := load("--config", file); on || err != nil {
		t.Errorf("ops.metrics: false in the file: %v %v", on, err)
	}
	t.Setenv("AGENTBUS_OPS_METRICS", "true")
	if on, err := load("--config", file); !on || err != nil {
		t.Errorf("AGENTBUS_OPS_METRICS=true over the file: %v %v", on, err)
	}
	t.Setenv("AGENTBUS_OPS_METRICS", "false")
	if on, err := load(); on || err != nil {
		t.Errorf("AGENTBUS_OPS_METRICS=false: %v %v", on, err)
	}
	if on, err := load("--ops-metrics"); !on || err != nil {
		t.Errorf("--ops-metrics over AGENTBUS_OPS_METRICS=false: %v %v", on, err)
	}
	t.Setenv("AGENTBUS_OPS_METRICS", "maybe")
	if _, err := load(); err == nil || !strings.Contains(err.Error(), "AGENTBUS_OPS_METRICS") {
		t.Errorf("AGENTBUS_OPS_METRICS=maybe: %v", err)
	}
}
