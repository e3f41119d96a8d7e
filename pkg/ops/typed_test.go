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
	cat, err := catalog.Load(catalog.Builtin(), config.ExampleCatalog())
	if err != nil {
		t.Fatal(err)
	}
	s := ops.New(ops.Config{}, cat, ops.Ports{}, nil)
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
