package decide_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
)

// TestRegistrationDecidesOnTheCheckedProperties: the schemas check
// property names exactly and let others through, while encoding/json
// matches names regardless of case; a property whose name differs from
// the registration's only in case ("Accepts", or "acceptſ", which folds to
// "accepts") must not stand in for the one the schema checked.
func TestRegistrationDecidesOnTheCheckedProperties(t *testing.T) {
	subj := bus.Subjects{Prefix: "agentbus"}
	deciders := decide.ControlPlane{Subjects: subj}.Deciders()
	for _, data := range []string{
		`{"name":"a","accepts":["PlaceOrder"],"Accepts":[">"]}`,
		`{"name":"a","accepts":["PlaceOrder"],"ACCEPTS":[">"],"x-extra":1}`,
		`{"name":"a","accepts":["PlaceOrder"],"acceptſ":[">"]}`,
	} {
		cmd := decide.Command{Tenant: "t", CorrelationID: "corr", Type: decide.TypeRegisterAgent,
			Envelope: &envelope.Envelope{Type: decide.TypeRegisterAgent, Data: json.RawMessage(data)}}
		d, err := deciders[decide.TypeRegisterAgent].Decide(context.Background(), cmd, lastEvents{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Reject != nil || len(d.Events) != 1 {
			t.Fatalf("%s: decided %+v; want the agent registered", data, d)
		}
		var reg decide.Registration
		if err := json.Unmarshal(d.Events[0].Data, &reg); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(reg.Accepts, []string{"PlaceOrder"}) {
			t.Errorf("%s: registered accepts %v; want [PlaceOrder]", data, reg.Accepts)
		}
	}
}
