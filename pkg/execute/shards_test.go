package execute

import (
	"log/slog"
	"testing"

	"github.com/agentbus/agentbus/config"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
)

// TestOrderKeyIsTheRulesAggregateShard: the commands a catalogue rule
// places on one shard share an ordering key (the shard is appended to
// from one worker at a time), whatever their type; others are ordered by
// correlation.
func TestOrderKeyIsTheRulesAggregateShard(t *testing.T) {
	cat, err := catalog.Load(catalog.Builtin(), config.ExampleCatalog())
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{}, cat, Ports{}, slog.New(slog.DiscardHandler))
	msg := func(typ, data, corr string) *bus.Message {
		return &bus.Message{Subject: "agentbus.cmd.default." + typ, Header: bus.Header{bus.HeaderCorrelationID: {corr}},
			Data: []byte(`{"specversion":"1.0","id":"x","source":"s","type":"` + typ + `","data":` + data + `}`)}
	}
	other := "o-2"
	for bus.ShardOf(other) == bus.ShardOf("o-1") {
		other += "x"
	}
	place := r.OrderKey(msg("PlaceOrder", `{"orderId":"o-1"}`, "c1"))
	if want := "agentbus.evt.default.order." + bus.ShardOf("o-1") + ".*"; place != want {
		t.Errorf("PlaceOrder o-1: key %q, want %q", place, want)
	}
	if k := r.OrderKey(msg("CancelOrder", `{"orderId":"o-1","reason":"r"}`, "c2")); k != place {
		t.Errorf("CancelOrder o-1: key %q, want PlaceOrder's %q", k, place)
	}
	if k := r.OrderKey(msg("PlaceOrder", `{"orderId":"`+other+`"}`, "c3")); k == place {
		t.Errorf("an order of another shard has the same key %q", k)
	}
	for _, tc := range []struct{ name, typ, data string }{
		{"no aggregate id", "PlaceOrder", `{"customer":"ada"}`},
		{"an id that is not one", "PlaceOrder", `{"orderId":"o 1"}`},
		{"data not an object", "PlaceOrder", `[1]`},
		{"a type no rule places on an aggregate", "ShipOrder", `{"orderId":"o-1"}`},
	} {
		if k := r.OrderKey(msg(tc.typ, tc.data, "corr-"+tc.name)); k != "corr-"+tc.name {
			t.Errorf("%s: key %q, want the correlation id", tc.name, k)
		}
	}
}
