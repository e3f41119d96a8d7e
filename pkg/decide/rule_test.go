package decide

import (
	"context"
	"testing"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// TestRuleAggregateID: a declarative rule reads the aggregate id from
// data's top-level member as encoding/json would (the last of a repeated
// key) and rejects data without a valid one.
func TestRuleAggregateID(t *testing.T) {
	entry := &catalog.Entry{Rule: &catalog.Rule{Emits: "OrderPlaced",
		Aggregate: &catalog.AggregateRule{Type: "order", IDField: "orderId", Expect: catalog.ExpectNew}}}
	tests := []struct {
		data, id string // id "" = rejected
	}{
		{`{"orderId":"o-1","qty":2}`, "o-1"},
		{`{"qty":{"orderId":"inner"},"orderId":"o-2"}`, "o-2"},
		{`{"orderId":"first","orderId":"last"}`, "last"},
		{` { "orderId" : "o\u002d3" } `, "o-3"},
		{`{"orderId":5}`, ""},
		{`{"orderId":"has space"}`, ""},
		{`{"qty":2}`, ""},
		{`["orderId","o-1"]`, ""},
		{`{"orderId":`, ""},
	}
	for _, tt := range tests {
		cmd := Command{Tenant: "default", CorrelationID: "c", Type: "PlaceOrder",
			Envelope: &envelope.Envelope{Type: "PlaceOrder", Data: []byte(tt.data)}, Entry: entry}
		d, err := RuleDecider{}.Decide(context.Background(), cmd, nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.data, err)
		}
		if tt.id == "" {
			if d.Reject == nil || d.Reject.Code != errs.CodeValidationFailed {
				t.Errorf("%s: decided %+v, want a VALIDATION_FAILED rejection", tt.data, d)
			}
			continue
		}
		if d.Reject != nil || len(d.Events) != 1 || d.Events[0].AggID != tt.id || d.Events[0].AggType != "order" {
			t.Errorf("%s: decided %+v, want one event on order %q", tt.data, d, tt.id)
		}
	}
}
