package ops_test

import (
	"encoding/json"
	"testing"

	"github.com/agentbus/agentbus/config"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
)

// TestPrepareTyped: a typed command's envelope is completed with the
// newest version's dataschema, the given or a fresh id, the source, and a
// time; its correlation id is the one submitCommand answers; an unknown
// type is UNKNOWN_COMMAND_TYPE.
func TestPrepareTyped(t *testing.T) {
	t.Parallel()
	s := exampleSurface(t)
	p, err := s.PrepareTyped("acme", ops.TypedCommand{Type: "PlaceOrder", Data: json.RawMessage(`{"orderId":"o-1"}`), Source: "mcp:key-1"})
	if err != nil {
		t.Fatal(err)
	}
	env, err := envelope.Decode(p.Body, envelope.Command)
	if err != nil {
		t.Fatalf("the completed envelope is refused: %v\n%s", err, p.Body)
	}
	if env.DataSchema != "place-order/2.0" || env.Source != "mcp:key-1" || env.ID == "" || env.Type != "PlaceOrder" {
		t.Errorf("envelope %+v", env)
	}
	if want := envelope.CorrelationID("acme", "mcp:key-1", env.ID); p.CorrelationID != want {
		t.Errorf("correlation id %s, want %s", p.CorrelationID, want)
	}
	if c, ok := ops.CommandCorrelation("acme", p.Body); !ok || c != p.CorrelationID {
		t.Errorf("CommandCorrelation %s %v, want %s", c, ok, p.CorrelationID)
	}
	again, _ := s.PrepareTyped("acme", ops.TypedCommand{Type: "PlaceOrder", Data: json.RawMessage(`{}`), Source: "s", ID: "given"})
	if want := envelope.CorrelationID("acme", "s", "given"); again.CorrelationID != want {
		t.Errorf("with an id: %s, want %s", again.CorrelationID, want)
	}
	if _, err := s.PrepareTyped("acme", ops.TypedCommand{Type: "NoSuchThing", Data: json.RawMessage(`{}`), Source: "s"}); errs.CodeOf(err) != errs.CodeUnknownCommandType {
		t.Errorf("unknown type: %v", err)
	}
	if _, ok := ops.CommandCorrelation("acme", []byte(`[1]`)); ok {
		t.Error("a body without id and source has a correlation id")
	}
	if got := ops.SnakeCase("PlaceOrder"); got != "place_order" {
		t.Errorf("SnakeCase %s", got)
	}
}

// TestPrepareTypedVersionsAndCallers: a typed command becomes an envelope
// that passes the envelope rules and the catalogue: the given id or a fresh
// one, the caller's source (CallerSource), the newest version unless one
// is given; an unknown type is UNKNOWN_COMMAND_TYPE, data that is not JSON
// MALFORMED_JSON.
func TestPrepareTypedVersionsAndCallers(t *testing.T) {
	t.Parallel()
	s := exampleSurface(t)
	data := json.RawMessage(`{"orderId":"o-1","customer":"ada","items":[{"sku":"tea","quantity":1}]}`)
	for _, tc := range []struct {
		name, id, version, caller string
		wantSchema, wantSource    string
	}{
		{"defaults", "", "", "key-1", "place-order/2.0", "agentbus/caller/key-1"},
		{"given id and version", "cmd-7", "1.0", "", "place-order/1.0", "agentbus/caller/anonymous"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.PrepareTyped("default", ops.TypedCommand{Type: "PlaceOrder", Version: tc.version, ID: tc.id, Data: data,
				Source: ops.CallerSource(tc.caller)})
			if err != nil {
				t.Fatal(err)
			}
			raw := p.Body
			env, err := envelope.Decode(raw, envelope.Command)
			if err != nil {
				t.Fatalf("%s: %v", raw, err)
			}
			if env.DataSchema != tc.wantSchema || env.Source != tc.wantSource || env.ID == "" || (tc.id != "" && env.ID != tc.id) {
				t.Fatalf("envelope %s", raw)
			}
		})
	}
	if _, err := s.PrepareTyped("default", ops.TypedCommand{Type: "NoSuchType"}); errs.CodeOf(err) != errs.CodeUnknownCommandType {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := s.PrepareTyped("default", ops.TypedCommand{Type: "PlaceOrder", Data: json.RawMessage(`{"a":`)}); errs.CodeOf(err) != errs.CodeMalformedJSON {
		t.Fatalf("malformed data: %v", err)
	}
}

// exampleSurface is the operations on the built-in and example catalogue,
// without ports: enough for what needs no storage.
func exampleSurface(t *testing.T) *ops.Surface {
	t.Helper()
	cat, err := catalog.Load(catalog.Builtin(), config.ExampleCatalog())
	if err != nil {
		t.Fatal(err)
	}
	return ops.New(ops.Config{}, cat, ops.Ports{})
}
