package catalog_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// domainDir is the example domain catalogue shipped with the repository.
func domainDir() fs.FS { return os.DirFS("../../config/catalog") }

func loadAll(t *testing.T) *catalog.Catalog {
	t.Helper()
	c, err := catalog.Load(catalog.Builtin(), domainDir())
	if err != nil {
		t.Fatalf("Load(Builtin, config/catalog): %v", err)
	}
	return c
}

func TestLoadShippedCatalogues(t *testing.T) {
	t.Parallel()
	c := loadAll(t)

	commands := map[string]bool{}
	for _, e := range c.Commands() {
		commands[e.Schema+"/"+e.Version] = true
	}
	events := map[string]bool{}
	for _, e := range c.Events() {
		events[e.Schema+"/"+e.Version] = true
	}
	tests := []struct {
		kind catalog.Kind
		ref  string
	}{
		{catalog.KindCommand, "register-agent/1.0"},
		{catalog.KindCommand, "pause-agent/1.0"},
		{catalog.KindCommand, "resume-agent/1.0"},
		{catalog.KindCommand, "delete-agent/1.0"},
		{catalog.KindCommand, "register-service/1.0"},
		{catalog.KindCommand, "delete-service/1.0"},
		{catalog.KindCommand, "place-order/1.0"},
		{catalog.KindCommand, "place-order/2.0"},
		{catalog.KindCommand, "cancel-order/1.0"},
		{catalog.KindCommand, "add-note/1.0"},
		{catalog.KindCommand, "ship-order/1.0"},
		{catalog.KindEvent, "agent-registered/1.0"},
		{catalog.KindEvent, "agent-paused/1.0"},
		{catalog.KindEvent, "agent-resumed/1.0"},
		{catalog.KindEvent, "agent-deleted/1.0"},
		{catalog.KindEvent, "agent-consumer-failed/1.0"},
		{catalog.KindEvent, "service-registered/1.0"},
		{catalog.KindEvent, "service-deleted/1.0"},
		{catalog.KindEvent, "command-rejected/1.0"},
		{catalog.KindCommand, "create-subscription/1.0"},
		{catalog.KindCommand, "delete-subscription/1.0"},
		{catalog.KindCommand, "rotate-subscription-secret/1.0"},
		{catalog.KindCommand, "disable-subscription/1.0"},
		{catalog.KindCommand, "enable-subscription/1.0"},
		{catalog.KindCommand, "mark-subscription-failing/1.0"},
		{catalog.KindEvent, "subscription-created/1.0"},
		{catalog.KindEvent, "subscription-deleted/1.0"},
		{catalog.KindEvent, "subscription-secret-rotated/1.0"},
		{catalog.KindEvent, "subscription-disabled/1.0"},
		{catalog.KindEvent, "subscription-failing/1.0"},
		{catalog.KindEvent, "subscription-enabled/1.0"},
		{catalog.KindEvent, "order-placed/1.0"},
		{catalog.KindEvent, "order-cancelled/1.0"},
		{catalog.KindEvent, "note-added/1.0"},
		{catalog.KindEvent, "order-shipped/1.0"},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind)+"/"+tt.ref, func(t *testing.T) {
			t.Parallel()
			set := commands
			if tt.kind == catalog.KindEvent {
				set = events
			}
			if !set[tt.ref] {
				t.Errorf("%s %s is not in the loaded catalogue", tt.kind, tt.ref)
			}
		})
	}
	if got, want := len(commands)+len(events), len(tests); got != want {
		t.Errorf("catalogue has %d entries, want %d (update this test when adding entries)", got, want)
	}
}

func TestBuiltinCommandsHaveNoRule(t *testing.T) {
	t.Parallel()
	c, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatalf("Load(Builtin): %v", err)
	}
	for _, e := range c.Commands() {
		t.Run(e.Schema+"/"+e.Version, func(t *testing.T) {
			t.Parallel()
			if e.Rule != nil {
				t.Errorf("built-in command %s has a process rule; built-in processors handle it", e.Type)
			}
			if e.Version != "1.0" {
				t.Errorf("version = %q, want 1.0", e.Version)
			}
		})
	}
}

func TestDomainRules(t *testing.T) {
	t.Parallel()
	c := loadAll(t)
	tests := []struct {
		schema, version string
		emits           string
		aggregate       *catalog.AggregateRule
	}{
		{"place-order", "1.0", "OrderPlaced", &catalog.AggregateRule{Type: "order", IDField: "orderId", Expect: catalog.ExpectNew}},
		{"place-order", "2.0", "OrderPlaced", &catalog.AggregateRule{Type: "order", IDField: "orderId", Expect: catalog.ExpectNew}},
		{"cancel-order", "1.0", "OrderCancelled", &catalog.AggregateRule{Type: "order", IDField: "orderId", Expect: catalog.ExpectExists}},
		{"add-note", "1.0", "NoteAdded", nil},
	}
	for _, tt := range tests {
		t.Run(tt.schema+"/"+tt.version, func(t *testing.T) {
			t.Parallel()
			e, ok := c.Command(tt.schema, tt.version)
			if !ok {
				t.Fatalf("command %s/%s not found", tt.schema, tt.version)
			}
			if e.Rule == nil {
				t.Fatalf("command %s/%s has no process rule", tt.schema, tt.version)
			}
			if e.Rule.Emits != tt.emits {
				t.Errorf("emits = %q, want %q", e.Rule.Emits, tt.emits)
			}
			switch {
			case tt.aggregate == nil && e.Rule.Aggregate != nil:
				t.Errorf("aggregate = %+v, want none", *e.Rule.Aggregate)
			case tt.aggregate != nil && e.Rule.Aggregate == nil:
				t.Errorf("aggregate missing, want %+v", *tt.aggregate)
			case tt.aggregate != nil && *e.Rule.Aggregate != *tt.aggregate:
				t.Errorf("aggregate = %+v, want %+v", *e.Rule.Aggregate, *tt.aggregate)
			}
		})
	}

	t.Run("note-added is untyped", func(t *testing.T) {
		t.Parallel()
		e, ok := c.Event("note-added", "1.0")
		if !ok {
			t.Fatal("event note-added/1.0 not found")
		}
		if e.Typed() {
			t.Error("note-added/1.0 is typed, want untyped")
		}
		if e.Description == "" {
			t.Error("an untyped event needs a description: it is its main documentation")
		}
		if v := e.Validate([]byte(`{"anything":[1,2,3]}`)); len(v) != 0 {
			t.Errorf("untyped event rejected data: %v", v)
		}
	})
}

func TestEveryEntryHasValidExamples(t *testing.T) {
	t.Parallel()
	// The built-in schemas leave data open at the top; the example
	// catalogue closes every object it describes, so that a property it
	// does not know is refused rather than carried into the event.
	for _, src := range []struct {
		name   string
		dir    fs.FS
		closed bool
	}{
		{"builtin", catalog.Builtin(), false},
		{"domain", domainDir(), true},
	} {
		// Each catalogue loads on its own: the domain rules only emit
		// domain events.
		c, err := catalog.Load(src.dir)
		if err != nil {
			t.Fatalf("Load(%s): %v", src.name, err)
		}
		entries := append(c.Commands(), c.Events()...)
		if len(entries) == 0 {
			t.Fatalf("%s catalogue is empty", src.name)
		}
		for _, e := range entries {
			t.Run(fmt.Sprintf("%s/%s/%s/%s", src.name, e.Kind, e.Schema, e.Version), func(t *testing.T) {
				t.Parallel()
				if strings.TrimSpace(e.Description) == "" {
					t.Error("catalog.yaml description is empty")
				}
				if !e.Typed() {
					if e.Kind == catalog.KindCommand {
						t.Error("a command must have a schema")
					}
					return
				}
				var doc struct {
					Schema               string            `json:"$schema"`
					Title                string            `json:"title"`
					Description          string            `json:"description"`
					Type                 string            `json:"type"`
					AdditionalProperties any               `json:"additionalProperties"`
					Examples             []json.RawMessage `json:"examples"`
				}
				if err := json.Unmarshal(e.Doc, &doc); err != nil {
					t.Fatalf("schema document: %v", err)
				}
				if doc.Schema != "http://json-schema.org/draft-07/schema#" {
					t.Errorf("$schema = %q, want draft-07", doc.Schema)
				}
				if doc.Title != e.Type {
					t.Errorf("title = %q, want %q", doc.Title, e.Type)
				}
				if doc.Description == "" {
					t.Error("schema description is empty")
				}
				if doc.Type != "object" {
					t.Errorf("type = %q, want object", doc.Type)
				}
				if closed := doc.AdditionalProperties == false; closed != src.closed {
					t.Errorf("top-level additionalProperties false: %v, want %v", closed, src.closed)
				}
				if len(doc.Examples) == 0 {
					t.Fatal("no examples")
				}
				for i, ex := range doc.Examples {
					if v := e.Validate(ex); len(v) != 0 {
						t.Errorf("examples[%d] is invalid: %v", i, v)
					}
					// An extra property is accepted where the top level is
					// left open, refused at its path where it is closed.
					extra := append([]byte(`{"x-extra-property":true,`), ex[1:]...)
					v := e.Validate(extra)
					switch {
					case !src.closed && len(v) != 0:
						t.Errorf("examples[%d] with an extra property is invalid: %v", i, v)
					case src.closed && (len(v) != 1 || v[0].Path != "$.data.x-extra-property"):
						t.Errorf("examples[%d] with an extra property: violations %v, want one at $.data.x-extra-property", i, v)
					}
				}
			})
		}
	}
}

// Every PlaceOrder example, whatever its version, must be a valid OrderPlaced:
// the rule copies the command's data into the event.
func TestRuleEventAcceptsCommandData(t *testing.T) {
	t.Parallel()
	c := loadAll(t)
	for _, cmd := range c.Commands() {
		if cmd.Rule == nil {
			continue
		}
		t.Run(cmd.Schema+"/"+cmd.Version, func(t *testing.T) {
			t.Parallel()
			ev, ok := c.LatestEvent(cmd.Rule.Emits)
			if !ok {
				t.Fatalf("event %s not found", cmd.Rule.Emits)
			}
			var doc struct {
				Examples []json.RawMessage `json:"examples"`
			}
			if err := json.Unmarshal(cmd.Doc, &doc); err != nil {
				t.Fatal(err)
			}
			for i, ex := range doc.Examples {
				if v := ev.Validate(ex); len(v) != 0 {
					t.Errorf("examples[%d] of %s/%s is not valid %s data: %v", i, cmd.Schema, cmd.Version, ev.Type, v)
				}
			}
		})
	}
}

func TestValidateViolationPaths(t *testing.T) {
	t.Parallel()
	c := loadAll(t)
	tests := []struct {
		name, schema, version, data string
		want                        []string // every path expected, in order
	}{
		{
			name: "quantity below minimum", schema: "place-order", version: "1.0",
			data: `{"orderId":"o1","customer":"c","items":[{"sku":"A","quantity":1},{"sku":"B","quantity":0}]}`,
			want: []string{"$.data.items.1.quantity"},
		},
		{
			name: "first item quantity not an integer", schema: "place-order", version: "1.0",
			data: `{"orderId":"o1","customer":"c","items":[{"sku":"A","quantity":1.5}]}`,
			want: []string{"$.data.items.0.quantity"},
		},
		{
			name: "several violations all reported", schema: "place-order", version: "1.0",
			data: `{"orderId":"bad id!","customer":"c","items":[]}`,
			want: []string{"$.data.items", "$.data.orderId"},
		},
		{
			name: "missing required property points at it", schema: "place-order", version: "2.0",
			data: `{"orderId":"o1","customer":"c","items":[{"sku":"A","quantity":1}]}`,
			want: []string{"$.data.currency"},
		},
		{
			name: "bad currency", schema: "place-order", version: "2.0",
			data: `{"orderId":"o1","customer":"c","items":[{"sku":"A","quantity":1}],"currency":"eur"}`,
			want: []string{"$.data.currency"},
		},
		{
			name: "missing nested required property", schema: "place-order", version: "1.0",
			data: `{"orderId":"o1","customer":"c","items":[{"quantity":1}]}`,
			want: []string{"$.data.items.0.sku"},
		},
		{
			name: "wrong root type", schema: "add-note", version: "1.0",
			data: `{"text":""}`,
			want: []string{"$.data.text"},
		},
		{
			name: "accepts must be PascalCase and unique", schema: "register-agent", version: "1.0",
			data: `{"name":"a","accepts":["place-order"],"produces":["A","A"]}`,
			want: []string{"$.data.accepts.0", "$.data.produces"},
		},
		{
			name: "extra properties, at the top and inside", schema: "place-order", version: "1.0",
			data: `{"orderId":"o1","customer":"c","items":[{"sku":"A","quantity":2,"gift":true}],"note":"x"}`,
			want: []string{"$.data.items.0.gift", "$.data.note"},
		},
		{
			name: "an extra property beside the note", schema: "add-note", version: "1.0",
			data: `{"text":"x","blob":[1,2,3]}`,
			want: []string{"$.data.blob"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, ok := c.Command(tt.schema, tt.version)
			if !ok {
				t.Fatalf("command %s/%s not found", tt.schema, tt.version)
			}
			v := e.Validate([]byte(tt.data))
			var got []string
			for _, x := range v {
				got = append(got, x.Path)
				if x.Message == "" {
					t.Errorf("violation at %s has no message", x.Path)
				}
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("paths = %q, want %q (violations %+v)", got, tt.want, v)
			}
		})
	}
}

func command(t *testing.T, typ, dataschema, data string) *envelope.Envelope {
	t.Helper()
	raw := fmt.Sprintf(`{"specversion":"1.0","id":"c-1","source":"test","type":%q,`+
		`"datacontenttype":"application/json","dataschema":%q,"time":"2026-01-02T15:04:05Z","data":%s}`,
		typ, dataschema, data)
	env, err := envelope.Decode([]byte(raw), envelope.Command)
	if err != nil {
		t.Fatalf("envelope.Decode: %v", err)
	}
	return env
}

func TestResolveCommand(t *testing.T) {
	t.Parallel()
	c := loadAll(t)
	const order1 = `{"orderId":"ord-1","customer":"Ada","items":[{"sku":"A","quantity":1}]}`
	const order2 = `{"orderId":"ord-1","customer":"Ada","items":[{"sku":"A","quantity":1}],"currency":"EUR"}`
	tests := []struct {
		name, typ, dataschema, data string
		wantCode                    errs.Code
		wantPath                    string // first violation path, when an error is expected
		wantVersion                 string // entry version, on success
	}{
		{name: "place-order 1.0", typ: "PlaceOrder", dataschema: "place-order/1.0", data: order1, wantVersion: "1.0"},
		{name: "place-order 2.0", typ: "PlaceOrder", dataschema: "place-order/2.0", data: order2, wantVersion: "2.0"},
		{name: "built-in command", typ: "PauseAgent", dataschema: "pause-agent/1.0", data: `{"id":"a1"}`, wantVersion: "1.0"},
		{name: "unknown type", typ: "RefundOrder", dataschema: "refund-order/1.0", data: `{}`,
			wantCode: errs.CodeUnknownCommandType, wantPath: "$.type"},
		{name: "event type is not a command", typ: "OrderPlaced", dataschema: "order-placed/1.0", data: order1,
			wantCode: errs.CodeUnknownCommandType, wantPath: "$.type"},
		{name: "dataschema of another type", typ: "PlaceOrder", dataschema: "cancel-order/1.0", data: order1,
			wantCode: errs.CodeValidationFailed, wantPath: "$.dataschema"},
		{name: "unknown version", typ: "PlaceOrder", dataschema: "place-order/3.0", data: order1,
			wantCode: errs.CodeValidationFailed, wantPath: "$.dataschema"},
		{name: "2.0 data missing currency", typ: "PlaceOrder", dataschema: "place-order/2.0", data: order1,
			wantCode: errs.CodeValidationFailed, wantPath: "$.data.currency"},
		{name: "bad data", typ: "PlaceOrder", dataschema: "place-order/1.0",
			data:     `{"orderId":"ord-1","customer":"Ada","items":[{"sku":"A","quantity":0}]}`,
			wantCode: errs.CodeValidationFailed, wantPath: "$.data.items.0.quantity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, err := c.ResolveCommand(command(t, tt.typ, tt.dataschema, tt.data))
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("ResolveCommand: %v", err)
				}
				if e.Type != tt.typ || e.Version != tt.wantVersion {
					t.Errorf("entry = %s %s, want %s %s", e.Type, e.Version, tt.typ, tt.wantVersion)
				}
				return
			}
			if err == nil {
				t.Fatalf("ResolveCommand succeeded (entry %s %s), want %s", e.Type, e.Version, tt.wantCode)
			}
			if got := errs.CodeOf(err); got != tt.wantCode {
				t.Fatalf("code = %q, want %q (%v)", got, tt.wantCode, err)
			}
			var ae *errs.Error
			if !errors.As(err, &ae) || len(ae.Violations) == 0 {
				t.Fatalf("error has no violations: %v", err)
			}
			if ae.Violations[0].Path != tt.wantPath {
				t.Errorf("violations = %+v, want first path %q", ae.Violations, tt.wantPath)
			}
		})
	}
}

// Minimal valid pieces for the Load failure cases.
const (
	okYAML = `commands:
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
	okSchema  = `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"n":{"type":"integer"}},"examples":[{"n":1}]}`
	cmdPath   = "commands/do-thing/1.0.json"
	eventPath = "events/thing-done/1.0.json"
	yamlPath  = "catalog.yaml"
)

func mapFS(files map[string]string) fstest.MapFS {
	m := fstest.MapFS{}
	for name, body := range files {
		m[name] = &fstest.MapFile{Data: []byte(body)}
	}
	return m
}

func okFiles() map[string]string {
	return map[string]string{yamlPath: okYAML, cmdPath: okSchema, eventPath: okSchema}
}

func with(edits map[string]string) map[string]string {
	f := okFiles()
	for k, v := range edits {
		if v == "" {
			delete(f, k)
		} else {
			f[k] = v
		}
	}
	return f
}

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		builtin bool // load Builtin() before dirs
		dirs    []map[string]string
		wantErr string // substring of the error; "" means Load must succeed
	}{
		{name: "valid", dirs: []map[string]string{okFiles()}},
		{name: "missing examples", wantErr: `"examples"`, dirs: []map[string]string{with(map[string]string{
			cmdPath: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`})}},
		{name: "empty examples", wantErr: `"examples"`, dirs: []map[string]string{with(map[string]string{
			cmdPath: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","examples":[]}`})}},
		{name: "invalid example", wantErr: "examples[1] is invalid", dirs: []map[string]string{with(map[string]string{
			eventPath: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"n":{"type":"integer"}},"examples":[{"n":1},{"n":"one"}]}`})}},
		{name: "example not an object", wantErr: "examples[0] is not an object", dirs: []map[string]string{with(map[string]string{
			cmdPath: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","examples":[[1]]}`})}},
		{name: "duplicate entry in one file", wantErr: "defined twice", dirs: []map[string]string{with(map[string]string{
			yamlPath: okYAML + `  - type: ThingDone
    version: "1.0"
    description: Again.
`})}},
		{name: "duplicate of a built-in entry", wantErr: "PauseAgent 1.0: defined twice", builtin: true, dirs: []map[string]string{{
			yamlPath:                        "commands:\n  - {type: PauseAgent, version: \"1.0\", description: Shadows the built-in.}\n",
			"commands/pause-agent/1.0.json": okSchema}}},
		{name: "new version of a built-in type", builtin: true, dirs: []map[string]string{{
			yamlPath:                        "commands:\n  - {type: PauseAgent, version: \"1.1\", description: A later version.}\n",
			"commands/pause-agent/1.1.json": okSchema}}},
		{name: "rule emits an unknown event", wantErr: `emits "NoSuchEvent"`, dirs: []map[string]string{with(map[string]string{
			yamlPath: strings.Replace(okYAML, "emits: ThingDone", "emits: NoSuchEvent", 1)})}},
		{name: "rule emits a non-PascalCase type", wantErr: "process.emits", dirs: []map[string]string{with(map[string]string{
			yamlPath: strings.Replace(okYAML, "emits: ThingDone", "emits: thing-done", 1)})}},
		{name: "bad expect", wantErr: "expect", dirs: []map[string]string{with(map[string]string{
			yamlPath: strings.Replace(okYAML, "emits: ThingDone", "emits: ThingDone\n      aggregate: {type: thing, idField: n, expect: maybe}", 1)})}},
		{name: "aggregate without idField", wantErr: "idField", dirs: []map[string]string{with(map[string]string{
			yamlPath: strings.Replace(okYAML, "emits: ThingDone", "emits: ThingDone\n      aggregate: {type: thing}", 1)})}},
		{name: "bad version string", wantErr: "version must be", dirs: []map[string]string{with(map[string]string{
			yamlPath: strings.Replace(okYAML, `version: "1.0"`, `version: "v1"`, 1)})}},
		{name: "version with patch", wantErr: "version must be", dirs: []map[string]string{with(map[string]string{
			yamlPath: strings.Replace(okYAML, `version: "1.0"`, `version: "1.0.0"`, 1)})}},
		{name: "type not PascalCase", wantErr: "PascalCase", dirs: []map[string]string{with(map[string]string{
			yamlPath: strings.Replace(okYAML, "type: DoThing", "type: do-thing", 1)})}},
		{name: "schema does not compile", wantErr: "does not compile", dirs: []map[string]string{with(map[string]string{
			cmdPath: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"n":{"type":12}},"examples":[{"n":1}]}`})}},
		{name: "schema is not JSON", wantErr: "not a JSON object", dirs: []map[string]string{with(map[string]string{
			cmdPath: `{"type":`})}},
		{name: "schema file missing", wantErr: cmdPath, dirs: []map[string]string{with(map[string]string{cmdPath: ""})}},
		{name: "untyped event needs no file", dirs: []map[string]string{with(map[string]string{
			yamlPath:  strings.Replace(okYAML, "description: A thing was done.", "description: A thing was done.\n    untyped: true", 1),
			eventPath: ""})}},
		{name: "untyped command is unknown field", wantErr: `unknown field "untyped"`, dirs: []map[string]string{with(map[string]string{
			yamlPath: strings.Replace(okYAML, "description: Does a thing.", "description: Does a thing.\n    untyped: true", 1),
			cmdPath:  ""})}},
		{name: "unknown yaml field", wantErr: `unknown field "descripton"`, dirs: []map[string]string{with(map[string]string{
			yamlPath: strings.Replace(okYAML, "description: Does a thing.", "description: Does a thing.\n    descripton: typo", 1)})}},
		{name: "unknown top-level yaml field", wantErr: `unknown field "queries"`, dirs: []map[string]string{with(map[string]string{
			yamlPath: okYAML + "queries: []\n"})}},
		{name: "catalog.yaml missing", wantErr: "catalog.yaml", dirs: []map[string]string{with(map[string]string{yamlPath: ""})}},
		{name: "rule may emit an event of an earlier directory", dirs: []map[string]string{okFiles(), {
			yamlPath:                     "commands:\n  - type: DoOther\n    version: \"1.0\"\n    description: x.\n    process: {emits: ThingDone}\n",
			"commands/do-other/1.0.json": okSchema}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var dirs []fs.FS
			if tt.builtin {
				dirs = append(dirs, catalog.Builtin())
			}
			for _, d := range tt.dirs {
				dirs = append(dirs, mapFS(d))
			}
			c, err := catalog.Load(dirs...)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if c == nil {
					t.Fatal("Load returned a nil catalogue")
				}
				return
			}
			if err == nil {
				t.Fatalf("Load succeeded, want an error containing %q", tt.wantErr)
			}
			if c != nil {
				t.Error("Load returned a catalogue along with an error")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestVersionsAndLatest(t *testing.T) {
	t.Parallel()
	files := okFiles()
	files[yamlPath] = `commands:
  - {type: DoThing, version: "1.10", description: d.}
  - {type: DoThing, version: "1.9", description: d.}
  - {type: DoThing, version: "2.0", description: d.}
events:
  - {type: ThingDone, version: "10.0", description: d., untyped: true}
  - {type: ThingDone, version: "9.1", description: d., untyped: true}
`
	files["commands/do-thing/1.10.json"] = okSchema
	files["commands/do-thing/1.9.json"] = okSchema
	files["commands/do-thing/2.0.json"] = okSchema
	c, err := catalog.Load(mapFS(files))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	tests := []struct {
		name string
		got  func() string
		want string
	}{
		{"command versions ascending", func() string {
			var v []string
			for _, e := range c.CommandVersions("DoThing") {
				v = append(v, e.Version)
			}
			return strings.Join(v, ",")
		}, "1.9,1.10,2.0"},
		{"latest event is numerically newest", func() string {
			e, ok := c.LatestEvent("ThingDone")
			if !ok {
				return "none"
			}
			return e.Version
		}, "10.0"},
		{"unknown event has no latest", func() string {
			if _, ok := c.LatestEvent("Nope"); ok {
				return "found"
			}
			return "none"
		}, "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.got(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSubscriptionSchemasBounded: every string and array of the built-in
// subscription commands and events is bounded (maxLength or enum,
// maxItems), so no member of a subscription can grow without limit.
func TestSubscriptionSchemasBounded(t *testing.T) {
	t.Parallel()
	c, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch n := v.(type) {
		case map[string]any:
			if n["type"] == "string" && n["maxLength"] == nil && n["enum"] == nil {
				t.Errorf("%s: a string without maxLength", path)
			}
			if n["type"] == "array" && n["maxItems"] == nil {
				t.Errorf("%s: an array without maxItems", path)
			}
			for k, sub := range n {
				if k != "examples" {
					walk(path+"."+k, sub)
				}
			}
		case []any:
			for i, sub := range n {
				walk(fmt.Sprintf("%s[%d]", path, i), sub)
			}
		}
	}
	seen := 0
	for _, e := range append(c.Commands(), c.Events()...) {
		if !strings.Contains(e.Type, "Subscription") {
			continue
		}
		seen++
		var doc any
		if err := json.Unmarshal(e.Doc, &doc); err != nil {
			t.Fatal(err)
		}
		walk(e.Schema, doc)
	}
	if seen != 12 {
		t.Fatalf("%d subscription schemas, want 12", seen)
	}
}
