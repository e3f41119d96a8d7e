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

// TestPrepareTypedVersionsAndCallers: a typed command becomes an envelope
// that passes the envelope rules and the catalogue: the given id or a fresh
// one, the caller's source (CallerSource), the newest version unless one
// is given; an unknown type is UNKNOWN_COMMAND_TYPE, data that is not JSON
// MALFORMED_JSON.
func TestPrepareTypedVersionsAndCallers(t *testing.T) {
	t.Parallel()
	cat, err := catalog.Load(catalog.Builtin(), config.ExampleCatalog())
	if err != nil {
		t.Fatal(err)
	}
	s := ops.New(ops.Config{}, cat, ops.Ports{}, nil)
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
