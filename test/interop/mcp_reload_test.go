package interop_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/config"
	"github.com/agentbus/agentbus/pkg/settings"
)

// TestMCPTypeScriptClientFollowsReload: the official TypeScript client is
// told notifications/tools/list_changed when a catalogue reload adds a
// command type, and then lists its typed tool.
func TestMCPTypeScriptClientFollowsReload(t *testing.T) {
	t.Parallel()
	node := requireMCPPackages(t)
	dir := filepath.Join(t.TempDir(), "catalog")
	if err := os.CopyFS(dir, config.ExampleCatalog()); err != nil {
		t.Fatal(err)
	}
	s := startAgentbus(t, func(c *settings.Config) { c.Catalog.Dirs = []string{dir} })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	steps := runSteps(ctx, t, node, []string{"mcp-reload.mjs", s.URL + "/mcp"}, func(st step) string {
		if st.Step != "tools" {
			return ""
		}
		addReturnOrder(t, dir)
		if err := s.ReloadCatalog(ctx); err != nil {
			t.Errorf("ReloadCatalog: %v", err)
		}
		return "reloaded"
	})
	if before := steps["tools"].Names; slices.Contains(before, "return_order") || !slices.Contains(before, "place_order") {
		t.Errorf("tools before the reload: %v", before)
	}
	if after := steps["tools-after"].Names; !slices.Contains(after, "return_order") || !slices.Contains(after, "place_order") {
		t.Errorf("tools after the reload: %v", after)
	}
}

// addReturnOrder adds the command type ReturnOrder to the catalogue
// directory dir.
func addReturnOrder(t *testing.T, dir string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(raw), "\ncommands:\n", "\ncommands:\n  - type: ReturnOrder\n    version: \"1.0\"\n    description: Returns an order.\n", 1)
	schema := `{"type":"object","properties":{"orderId":{"type":"string"}},"examples":[{"orderId":"ord-1"}]}`
	if err := os.MkdirAll(filepath.Join(dir, "commands", "return-order"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"catalog.yaml": yaml, "commands/return-order/1.0.json": schema} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
