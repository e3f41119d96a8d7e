package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/config"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// returnOrder is a command type the reloads add: without a rule, it waits
// for an agent.
const (
	returnOrderEntry = `  - type: ReturnOrder
    version: "1.0"
    description: Returns a delivered order.
`
	returnOrderSchema = `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
"properties":{"orderId":{"type":"string","minLength":1}},"required":["orderId"],"examples":[{"orderId":"ord-1"}]}`
	returnOrderPath = "commands/return-order/1.0.json"
)

// reloadCatalog is a catalogue directory on disk, a copy of the example
// one, that a test edits between reloads.
type reloadCatalog struct {
	t    *testing.T
	dir  string
	yaml string // the example's catalog.yaml
}

func newReloadCatalog(t *testing.T) *reloadCatalog {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "catalog")
	if err := os.CopyFS(dir, config.ExampleCatalog()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return &reloadCatalog{t: t, dir: dir, yaml: string(raw)}
}

func (c *reloadCatalog) write(name, body string) {
	c.t.Helper()
	p := filepath.Join(c.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// withReturnOrder adds ReturnOrder with schema.
func (c *reloadCatalog) withReturnOrder(schema string) {
	c.t.Helper()
	if !strings.Contains(c.yaml, "\ncommands:\n") {
		c.t.Fatal("the example catalog.yaml has no commands: line")
	}
	c.write("catalog.yaml", strings.Replace(c.yaml, "\ncommands:\n", "\ncommands:\n"+returnOrderEntry, 1))
	c.write(returnOrderPath, schema)
}

// c2yaml is the catalogue file as withReturnOrder writes it.
func c2yaml(c *reloadCatalog) string {
	return strings.Replace(c.yaml, "\ncommands:\n", "\ncommands:\n"+returnOrderEntry, 1)
}

// asShipped puts the example catalogue back.
func (c *reloadCatalog) asShipped() {
	c.t.Helper()
	c.write("catalog.yaml", c.yaml)
	if err := os.RemoveAll(filepath.Join(c.dir, "commands", "return-order")); err != nil {
		c.t.Fatal(err)
	}
}

func returnOrder(id string) map[string]any {
	return map[string]any{"specversion": "1.0", "id": id, "source": "reload-test", "type": "ReturnOrder",
		"datacontenttype": "application/json", "dataschema": "return-order/1.0", "time": "2026-01-01T00:00:00Z",
		"data": map[string]any{"orderId": "ord-1"}}
}

// toolNames lists the session's tools.
func toolNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// waitListChanged waits for one notifications/tools/list_changed.
func waitListChanged(t *testing.T, changed <-chan struct{}) {
	t.Helper()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed after the reload")
	}
}

// cardSkills lists the skill ids of the A2A agent card.
func cardSkills(t *testing.T, s *server.Server) []string {
	t.Helper()
	r := get(t, s.URL+"/.well-known/agent-card.json")
	if r.Status != 200 {
		t.Fatalf("agent card: %d %s", r.Status, r.Body)
	}
	var card struct {
		Skills []struct {
			ID string `json:"id"`
		} `json:"skills"`
	}
	if err := json.Unmarshal(r.Body, &card); err != nil {
		t.Fatalf("agent card: %v", err)
	}
	var ids []string
	for _, sk := range card.Skills {
		ids = append(ids, sk.ID)
	}
	return ids
}

// TestCatalogReload: a reload adds a command type, which POST /commands
// then accepts, GET /commands lists, whose schema is served, whose typed
// tool an open MCP session is told of (notifications/tools/list_changed)
// and lists, and which the agent card offers; a broken catalogue is
// refused and the last good one keeps working; a reload that removes the
// type takes all of it away.
func TestCatalogReload(t *testing.T) {
	t.Parallel()
	cat := newReloadCatalog(t)
	s := start(t, func(c *settings.Config) { c.Catalog.Dirs = []string{cat.dir} })
	ctx := context.Background()

	changed := make(chan struct{}, 8)
	client := sdk.NewClient(&sdk.Implementation{Name: "reload-test", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cs, err := client.Connect(cctx, &sdk.StreamableClientTransport{Endpoint: s.URL + "/mcp", MaxRetries: -1}, nil)
	cancel()
	if err != nil {
		t.Fatalf("MCP connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if tools := toolNames(t, cs); slices.Contains(tools, "return_order") || !slices.Contains(tools, "ship_order") {
		t.Fatalf("tools before the reload: %v", tools)
	}
	if r := postJSON(t, s.URL+"/commands", returnOrder("r-0")); r.Status != 400 || r.errorCode(t) != "UNKNOWN_COMMAND_TYPE" {
		t.Fatalf("ReturnOrder before the reload: %d %s", r.Status, r.Body)
	}

	// Added.
	cat.withReturnOrder(returnOrderSchema)
	if err := s.ReloadCatalog(ctx); err != nil {
		t.Fatalf("ReloadCatalog: %v", err)
	}
	corr := submitCommand(t, s.URL, returnOrder("r-1"))
	if !slices.ContainsFunc(plCatalog(t, s, "/commands", "commands"), func(e plEntry) bool { return e.Schema == "return-order" && e.Version == "1.0" }) {
		t.Error("GET /commands does not list return-order/1.0")
	}
	if r := get(t, s.URL+"/commands/return-order/1.0"); r.Status != 200 || !strings.Contains(string(r.Body), `"orderId"`) {
		t.Errorf("GET /commands/return-order/1.0: %d %s", r.Status, r.Body)
	}
	invalid := returnOrder("r-bad")
	invalid["data"] = map[string]any{}
	if bad := postJSON(t, s.URL+"/commands", invalid); bad.Status != 400 || bad.errorCode(t) != "VALIDATION_FAILED" {
		t.Errorf("ReturnOrder without orderId: %d %s, want 400 VALIDATION_FAILED", bad.Status, bad.Body)
	}
	// Left to an agent, the command of the new type has its receipt:
	// accepted.
	testkit.Eventually(t, "the ReturnOrder command's trace", func() bool {
		r := get(t, s.URL+"/traces/"+corr)
		return r.Status == 200 && strings.Contains(string(r.Body), `"accepted"`)
	})
	waitListChanged(t, changed)
	if tools := toolNames(t, cs); !slices.Contains(tools, "return_order") {
		t.Fatalf("tools after the reload: %v", tools)
	}
	cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "return_order", Arguments: map[string]any{"orderId": "ord-2"}})
	cancel()
	if err != nil || res.IsError {
		t.Fatalf("return_order: %v %+v", err, res)
	}
	if skills := cardSkills(t, s); !slices.Contains(skills, "ReturnOrder") {
		t.Errorf("agent card skills after the reload: %v", skills)
	}

	// Broken: refused, the last good catalogue stays.
	cat.withReturnOrder(`{"type":"object","properties":{"orderId":{"type":"string"}}}`) // no examples
	if err := s.ReloadCatalog(ctx); err == nil || !strings.Contains(err.Error(), "examples") {
		t.Fatalf("ReloadCatalog of a schema without examples = %v, want it refused", err)
	}
	// A published version's schema does not change.
	cat.withReturnOrder(`{"type":"object","properties":{"orderId":{"type":"string"}},"examples":[{"orderId":"x"}]}`)
	if err := s.ReloadCatalog(ctx); err == nil || !strings.Contains(err.Error(), "a published version does not change") {
		t.Fatalf("ReloadCatalog of an edited return-order/1.0 = %v, want it refused", err)
	}
	// A schema the MCP SDK refuses as a tool's input is refused too (a
	// new type's).
	cat.withReturnOrder(returnOrderSchema)
	cat.write("catalog.yaml", strings.Replace(c2yaml(cat), "\ncommands:\n", "\ncommands:\n  - type: AuditOrder\n    version: \"1.0\"\n    description: Audits an order.\n", 1))
	cat.write("commands/audit-order/1.0.json", `{"type":"object","properties":{"orderId":{"type":"object","x-mcp-header":"Order"}},"examples":[{"orderId":{}}]}`)
	if err := s.ReloadCatalog(ctx); err == nil || !strings.Contains(err.Error(), "MCP tool") {
		t.Fatalf("ReloadCatalog of a schema that makes no MCP tool = %v, want it refused", err)
	}
	if err := os.RemoveAll(filepath.Join(cat.dir, "commands", "audit-order")); err != nil {
		t.Fatal(err)
	}
	cat.withReturnOrder(returnOrderSchema)
	submitCommand(t, s.URL, returnOrder("r-2"))
	if r := get(t, s.URL+"/commands/return-order/1.0"); r.Status != 200 || !strings.Contains(string(r.Body), `"examples"`) {
		t.Errorf("the schema served after a refused reload: %d %s", r.Status, r.Body)
	}
	if tools := toolNames(t, cs); !slices.Contains(tools, "return_order") {
		t.Fatalf("tools after a refused reload: %v", tools)
	}

	// Removed.
	cat.asShipped()
	if err := s.ReloadCatalog(ctx); err != nil {
		t.Fatalf("ReloadCatalog: %v", err)
	}
	if r := postJSON(t, s.URL+"/commands", returnOrder("r-3")); r.Status != 400 || r.errorCode(t) != "UNKNOWN_COMMAND_TYPE" {
		t.Errorf("ReturnOrder after its removal: %d %s", r.Status, r.Body)
	}
	if r := get(t, s.URL+"/commands/return-order/1.0"); r.Status != 404 {
		t.Errorf("GET /commands/return-order/1.0 after its removal: %d %s", r.Status, r.Body)
	}
	waitListChanged(t, changed)
	if tools := toolNames(t, cs); slices.Contains(tools, "return_order") || !slices.Contains(tools, "ship_order") {
		t.Fatalf("tools after the removal: %v", tools)
	}
	if skills := cardSkills(t, s); slices.Contains(skills, "ReturnOrder") {
		t.Errorf("agent card skills after the removal: %v", skills)
	}
}

// TestCatalogReloadRefusesRulesAndEditedSchemas: which command types
// agentbus processes, and how, is settled at start, and a published schema
// version does not change. A reload that takes DoThing's rule away and
// gives the new DoMore one is refused, and so is one that edits
// do-thing/1.0: the catalogue stays as it was (DoThing processed by its
// rule, DoMore unknown).
func TestCatalogReloadRefusesRulesAndEditedSchemas(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	schema := `{"type":"object","properties":{"n":{"type":"integer"}},"examples":[{"n":1}]}`
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	original := `commands:
  - type: DoThing
    version: "1.0"
    description: Does a thing.
    process:
      emits: ThingDone
events:
  - type: ThingDone
    version: "1.0"
    description: A thing was done.
`
	write("commands/do-thing/1.0.json", schema)
	write("events/thing-done/1.0.json", schema)
	write("catalog.yaml", original)
	s := start(t, func(c *settings.Config) { c.Catalog.Dirs = []string{dir} })

	write("commands/do-more/1.0.json", schema)
	write("catalog.yaml", `commands:
  - type: DoThing
    version: "1.0"
    description: Does a thing.
  - type: DoMore
    version: "1.0"
    description: Does more.
    process:
      emits: ThingDone
events:
  - type: ThingDone
    version: "1.0"
    description: A thing was done.
`)
	if err := s.ReloadCatalog(context.Background()); err == nil || !strings.Contains(err.Error(), "rules change at a restart") {
		t.Fatalf("a reload changing rules: %v", err)
	}
	write("catalog.yaml", original)
	write("commands/do-thing/1.0.json", `{"type":"object","properties":{"n":{"type":"string"}},"examples":[{"n":"1"}]}`)
	if err := s.ReloadCatalog(context.Background()); err == nil || !strings.Contains(err.Error(), "a published version does not change") {
		t.Fatalf("a reload editing do-thing/1.0: %v", err)
	}
	cmd := func(typ, schema, id string) map[string]any {
		return map[string]any{"specversion": "1.0", "id": id, "source": "reload-test", "type": typ, "datacontenttype": "application/json",
			"dataschema": schema, "time": "2026-01-01T00:00:00Z", "data": map[string]any{"n": 2}}
	}
	var tr struct {
		Status string            `json:"status"`
		Events []json.RawMessage `json:"events"`
	}
	done := submitCommand(t, s.URL, cmd("DoThing", "do-thing/1.0", "t-1"))
	testkit.Eventually(t, "DoThing processed", func() bool {
		r := get(t, s.URL+"/traces/"+done)
		_ = json.Unmarshal(r.Body, &tr)
		return r.Status == 200 && (tr.Status == "processed" || tr.Status == "rejected")
	})
	if tr.Status != "processed" || len(tr.Events) != 1 || !strings.Contains(string(tr.Events[0]), `"ThingDone"`) {
		t.Fatalf("DoThing after refused reloads: %s %s", tr.Status, tr.Events)
	}
	if r := postJSON(t, s.URL+"/commands", cmd("DoMore", "do-more/1.0", "m-1")); r.Status != 400 || r.errorCode(t) != "UNKNOWN_COMMAND_TYPE" {
		t.Fatalf("DoMore after a refused reload: %d %s", r.Status, r.Body)
	}
}

// TestVersionWithoutARuleIsRefused: a command type agentbus processes by
// the rule of one version, sent in a version without a rule, ends in
// CommandRejected CAPABILITY_NOT_SUPPORTED rather than being processed by
// no rule; the version with the rule is processed.
func TestVersionWithoutARuleIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	schema := `{"type":"object","properties":{"n":{"type":"integer"}},"examples":[{"n":1}]}`
	for name, body := range map[string]string{
		"commands/do-thing/1.0.json": schema,
		"commands/do-thing/2.0.json": schema,
		"events/thing-done/1.0.json": schema,
		"catalog.yaml": `commands:
  - type: DoThing
    version: "1.0"
    description: Does a thing.
    process:
      emits: ThingDone
  - type: DoThing
    version: "2.0"
    description: Does a thing, without a rule.
events:
  - type: ThingDone
    version: "1.0"
    description: A thing was done.
`,
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := start(t, func(c *settings.Config) { c.Catalog.Dirs = []string{dir} })
	cmd := func(version, id string) map[string]any {
		return map[string]any{"specversion": "1.0", "id": id, "source": "rule-test", "type": "DoThing", "datacontenttype": "application/json",
			"dataschema": "do-thing/" + version, "time": "2026-01-01T00:00:00Z", "data": map[string]any{"n": 2}}
	}
	if code := suRejection(t, s.URL, submitCommand(t, s.URL, cmd("2.0", "v2"))); code != "CAPABILITY_NOT_SUPPORTED" {
		t.Fatalf("DoThing 2.0, without a rule: rejection %q, want CAPABILITY_NOT_SUPPORTED", code)
	}
	if code := suRejection(t, s.URL, submitCommand(t, s.URL, cmd("1.0", "v1"))); code != "" {
		t.Fatalf("DoThing 1.0, with its rule: rejected %q", code)
	}
}
