package e2e_test

import (
	"encoding/json"
	"io/fs"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/test/testkit"

	"github.com/agentbus/agentbus/config"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/server"
)

// plEntry is a catalogue entry on the wire.
type plEntry struct {
	Type        string `json:"type"`
	Schema      string `json:"schema"`
	Version     string `json:"version"`
	DataSchema  string `json:"dataschema"`
	Description string `json:"description"`
}

// plCatalog GETs a catalogue and checks the members of every entry.
func plCatalog(t *testing.T, s *server.Server, path, key string) []plEntry {
	t.Helper()
	r := get(t, s.URL+path)
	if r.Status != 200 {
		t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
	}
	var top map[string][]map[string]any
	if err := json.Unmarshal(r.Body, &top); err != nil || len(top) != 1 || top[key] == nil {
		t.Fatalf("GET %s: want {%q: [...]}, got %s", path, key, r.Body)
	}
	var entries []plEntry
	raw, _ := json.Marshal(top[key])
	_ = json.Unmarshal(raw, &entries)
	for i, m := range top[key] {
		for k := range m {
			if !strings.Contains(" type schema version dataschema description ", " "+k+" ") {
				t.Errorf("%s entry %d has member %q", path, i, k)
			}
		}
		e := entries[i]
		if !envelope.ValidType(e.Type) || e.Schema != envelope.KebabCase(e.Type) || !envelope.ValidVersion(e.Version) {
			t.Errorf("%s entry %+v: type, kebab-case schema and version do not fit", path, e)
		}
	}
	return entries
}

func TestCommandCatalogue(t *testing.T) {
	t.Parallel()
	s := start(t)
	entries := plCatalog(t, s, "/commands", "commands")
	seen := map[string]plEntry{}
	for _, e := range entries {
		if _, dup := seen[e.Schema+"/"+e.Version]; dup {
			t.Errorf("%s/%s listed twice", e.Schema, e.Version)
		}
		seen[e.Schema+"/"+e.Version] = e
		want := s.URL + "/commands/" + e.Schema + "/" + e.Version
		if e.DataSchema != want {
			t.Errorf("%s %s: dataschema %q, want the absolute %q", e.Type, e.Version, e.DataSchema, want)
		}
		if u, err := url.Parse(e.DataSchema); err != nil || !u.IsAbs() {
			t.Errorf("dataschema %q is not an absolute URI", e.DataSchema)
		}
		if e.Description == "" {
			t.Errorf("%s %s has no description", e.Type, e.Version)
		}
	}
	for _, ref := range []string{"place-order/1.0", "place-order/2.0", "cancel-order/1.0", "add-note/1.0"} {
		if _, ok := seen[ref]; !ok {
			t.Errorf("%s is not listed", ref)
		}
	}
	if seen["place-order/2.0"].Type != "PlaceOrder" {
		t.Errorf("place-order/2.0 entry: %+v", seen["place-order/2.0"])
	}
}

// TestSchemaDocuments fetches schema documents by their routes and by the
// dataschema URIs the catalogues announce.
func TestSchemaDocuments(t *testing.T) {
	t.Parallel()
	s := start(t)
	shipped := func(kind, ref string) map[string]any {
		b, err := fs.ReadFile(config.ExampleCatalog(), kind+"/"+ref+".json")
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	found := []struct{ path, kind, ref string }{
		{"/commands/place-order/2.0", "commands", "place-order/2.0"},
		{"/commands/place-order/1.0", "commands", "place-order/1.0"},
		{"/events/order-placed/1.0", "events", "order-placed/1.0"},
		{"/events/order-cancelled/1.0", "events", "order-cancelled/1.0"},
	}
	for _, tt := range found {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			r := get(t, s.URL+tt.path)
			if r.Status != 200 {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			if ct := r.Header.Get("Content-Type"); ct != "application/schema+json" {
				t.Errorf("Content-Type %q, want application/schema+json", ct)
			}
			var doc map[string]any
			if err := json.Unmarshal(r.Body, &doc); err != nil {
				t.Fatal(err)
			}
			if ex, _ := doc["examples"].([]any); len(ex) == 0 {
				t.Errorf("schema has no examples")
			}
			if !reflect.DeepEqual(doc, shipped(tt.kind, tt.ref)) {
				t.Errorf("served schema differs from the shipped file")
			}
		})
	}
	missing := []string{
		"/commands/place-order/9.9", "/commands/no-such/1.0", "/commands/PlaceOrder/1.0", "/commands/order-placed/1.0",
		"/events/order-placed/9.0", "/events/place-order/1.0", "/events/no-such/1.0",
		"/events/note-added/1.0", // untyped: no schema
	}
	for _, path := range missing {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			plError(t, get(t, s.URL+path), 404, "SCHEMA_NOT_FOUND")
		})
	}
	t.Run("place-order 2.0 needs currency", func(t *testing.T) {
		var doc struct{ Required []string }
		_ = json.Unmarshal(get(t, s.URL+"/commands/place-order/2.0").Body, &doc)
		if !strings.Contains(strings.Join(doc.Required, ","), "currency") {
			t.Errorf("required = %v", doc.Required)
		}
	})
}

func TestEventCatalogue(t *testing.T) {
	t.Parallel()
	s := start(t)
	entries := plCatalog(t, s, "/events?view=catalog", "events")
	byType := map[string]plEntry{}
	for _, e := range entries {
		byType[e.Type] = e
		if e.Description == "" {
			t.Errorf("%s has no description", e.Type)
		}
		if e.DataSchema == "" {
			continue
		}
		want := s.URL + "/events/" + e.Schema + "/" + e.Version
		if e.DataSchema != want {
			t.Errorf("%s: dataschema %q, want %q", e.Type, e.DataSchema, want)
		}
		// Resolvable: the URI as announced serves the schema.
		r := get(t, e.DataSchema)
		if r.Status != 200 || r.Header.Get("Content-Type") != "application/schema+json" {
			t.Errorf("GET %s: %d %s", e.DataSchema, r.Status, r.Header.Get("Content-Type"))
		}
	}
	for _, typ := range []string{"OrderPlaced", "OrderCancelled", "NoteAdded", "CommandRejected"} {
		if _, ok := byType[typ]; !ok {
			t.Errorf("%s is not in the event catalogue", typ)
		}
	}
	if e := byType["NoteAdded"]; e.DataSchema != "" {
		t.Errorf("untyped NoteAdded has dataschema %q", e.DataSchema)
	}
	if e := byType["OrderPlaced"]; e.DataSchema == "" {
		t.Errorf("typed OrderPlaced has no dataschema")
	}

	for _, q := range []string{"view=bogus", "view=CATALOG", "view=catalog%20"} {
		t.Run(q, func(t *testing.T) {
			b := plError(t, get(t, s.URL+"/events?"+q), 400, "VALIDATION_FAILED")
			if len(b.Violations) != 1 || b.Violations[0].Path != "view" {
				t.Errorf("violations %+v", b.Violations)
			}
		})
	}
}

// TestShippedExamplesAreAccepted submits every example of every command
// schema, fetched over HTTP, as a command (an internal one is refused
// FORBIDDEN, as any of its kind). A webhook URL in an example is
// replaced by a loopback receiver of the test's own: no test reaches
// another address.
func TestShippedExamplesAreAccepted(t *testing.T) {
	t.Parallel()
	s := start(t, suLoopback)
	hook := suReceiver(t)
	entries := plCatalog(t, s, "/commands", "commands")
	n := 0
	for _, e := range entries {
		r := get(t, e.DataSchema)
		if r.Status != 200 {
			t.Fatalf("GET %s: %d", e.DataSchema, r.Status)
		}
		var doc struct {
			Examples []map[string]any `json:"examples"`
		}
		if err := json.Unmarshal(r.Body, &doc); err != nil || len(doc.Examples) == 0 {
			t.Errorf("%s/%s: no examples (%v)", e.Schema, e.Version, err)
			continue
		}
		for i, ex := range doc.Examples {
			if w, ok := ex["webhook"].(map[string]any); ok {
				w["url"] = hook
			}
			env := command(e.Type, e.Schema+"/"+e.Version, ex)
			if e.Type == "MarkSubscriptionFailing" { // internal: webhook delivery's alone
				plError(t, postJSON(t, s.URL+"/commands", env), 403, "FORBIDDEN")
				continue
			}
			if r := postJSON(t, s.URL+"/commands", env); r.Status != 202 {
				t.Errorf("%s/%s example %d: %d %s", e.Schema, e.Version, i, r.Status, r.Body)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no example was submitted")
	}
	if got := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; got != uint64(n) {
		t.Errorf("command stream holds %d messages, want %d", got, n)
	}
}
