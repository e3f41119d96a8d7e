package readme_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/settings"
)

// multiSection is the README's multi-tenant example.
const multiSection = "### Multi-tenant mode, step by step"

// TestReadmeMultiTenant runs the README's multi-tenant example as written
// (see runTerminals): agentbus with tenants acme and globex, a key for
// acme, a command to /acme/commands and its events; globex's routes
// refuse acme's key; a route without the tenant says where routes are.
// The example's config file holds the same settings.
func TestReadmeMultiTenant(t *testing.T) {
	run := runTerminals(t, multiSection, nil, "KEY", "ID")
	key, id := run.vars["KEY"], run.vars["ID"]
	if !strings.HasPrefix(key, "ab_") {
		t.Fatalf("$KEY is %q, not an API key", key)
	}
	if len(id) != 36 {
		t.Fatalf("$ID is %q, not the correlation id POST /acme/commands answers", id)
	}

	// The events of the command: one OrderPlaced, once processed.
	ev := run.recs[find(t, run.recs, 1, "acme's events of $ID", `/acme/events\?correlationId=\$(ID|\{ID\})`)[0]]
	if types := eventTypes(t, ev.Out); !slices.Equal(types, []string{"OrderPlaced"}) {
		_, body := getAs(t, run.base+"/acme/events?correlationId="+id, key, func(s int, b string) bool {
			return s == 200 && len(eventTypes(t, b)) > 0
		})
		if types := eventTypes(t, body); !slices.Equal(types, []string{"OrderPlaced"}) {
			t.Errorf("GET /acme/events?correlationId=$ID: want one OrderPlaced, got %s", body)
		}
	}
	log := run.recs[find(t, run.recs, 1, "acme's event log", `/acme/events["']?$`)[0]]
	if code, _, _, isErr := errorBody(log.Out); isErr {
		t.Errorf("GET /acme/events: error %s:\n%s", code, log.Out)
	}

	other := run.recs[find(t, run.recs, 1, "globex's events", `/globex/events`)[0]]
	if code, _, _, _ := errorBody(other.Out); code != "FORBIDDEN" {
		t.Errorf("GET /globex/events with acme's key: want FORBIDDEN, got:\n%s", other.Out)
	}
	bare := run.recs[find(t, run.recs, 1, "a route without its tenant", `(8080|[0-9]|\$\{?BASE\}?)/events["']?$`)[0]]
	if code, msg, _, _ := errorBody(bare.Out); code != "ROUTE_NOT_FOUND" || !strings.Contains(msg, "every resource route starts with /{tenantId}") {
		t.Errorf("GET /events in multi-tenant mode: want ROUTE_NOT_FOUND naming /{tenantId}, got:\n%s", bare.Out)
	}
	if s, body := getAs(t, run.base+"/acme/agents", "", func(int, string) bool { return true }); s != http.StatusUnauthorized {
		t.Errorf("GET /acme/agents without a key: %d %s, want 401", s, body)
	}

	// The config file of the example holds the same settings.
	var yamls []string
	for _, b := range sections(t, readme(t))[multiSection] {
		if b.Lang == "yaml" {
			yamls = append(yamls, b.Text)
		}
	}
	if len(yamls) != 1 {
		t.Fatalf("README.md %q: want one yaml block (the config file), found %d", multiSection, len(yamls))
	}
	path := filepath.Join(t.TempDir(), "agentbus.yaml")
	if err := os.WriteFile(path, []byte(yamls[0]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := settings.Default()
	if err := cfg.LoadFile(path); err != nil {
		t.Fatalf("the README's multi-tenant config file: %v", err)
	}
	if cfg.Tenancy.Mode != "multi" || !slices.Equal(cfg.Tenancy.Tenants, []string{"acme", "globex"}) || cfg.Auth.Type != "bearer" {
		t.Errorf("the README's multi-tenant config file is not the flags' settings: %+v %+v", cfg.Tenancy, cfg.Auth.Type)
	}
}
