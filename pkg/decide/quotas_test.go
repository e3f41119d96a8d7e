package decide_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// lastEvents is a decide.State holding the last event of some aggregates,
// by aggregate subject.
type lastEvents map[string]*bus.Message

func (l lastEvents) LastEvent(_ context.Context, tenant, aggType, aggID string) (*bus.Message, error) {
	if m, ok := l[bus.Subjects{Prefix: "agentbus"}.Aggregate(tenant, aggType, aggID)]; ok {
		return m, nil
	}
	return nil, errs.ErrNotFound
}

// TestRegistrationQuotas: a registration of a new id is rejected with
// QUOTA_EXCEEDED when its tenant is at its quota, or agentbus at its
// agents in all; an id that exists is still a conflict, and a redelivery
// of the command that registered it is still done.
func TestRegistrationQuotas(t *testing.T) {
	subj := bus.Subjects{Prefix: "agentbus"}
	counts := map[string]int{"full/agent": 3, "full/service": 2, "roomy/agent": 1, "roomy/service": 0}
	all := 4
	quotas := decide.Quotas{Agents: 3, Services: 2, AllAgents: 5, Count: func(tenant, aggType string) int {
		if tenant == "" {
			return all
		}
		return counts[tenant+"/"+aggType]
	}}
	existing := &bus.Message{Seq: 7, Subject: subj.Event(bus.RootEvents, "full", "agent", "taken", decide.TypeAgentRegistered),
		Header: bus.Header{bus.HeaderCorrelationID: {"other"}}}
	mine := &bus.Message{Seq: 8, Subject: subj.Event(bus.RootEvents, "full", "agent", "mine", decide.TypeAgentRegistered),
		Header: bus.Header{bus.HeaderCorrelationID: {"corr"}}}
	state := lastEvents{subj.Aggregate("full", "agent", "taken"): existing, subj.Aggregate("full", "agent", "mine"): mine}
	deciders := decide.ControlPlane{Subjects: subj, Quotas: quotas}.Deciders()
	tests := []struct {
		name, tenant, typ, id string
		all                   int
		code                  errs.Code // "" = registered
		events                int
		quota                 string
	}{
		{"tenant at its agents quota", "full", decide.TypeRegisterAgent, "new", 4, errs.CodeQuotaExceeded, 0, "agents"},
		{"an id that exists", "full", decide.TypeRegisterAgent, "taken", 4, errs.CodeAgentAlreadyRegistered, 0, ""},
		{"a redelivery of the registration", "full", decide.TypeRegisterAgent, "mine", 4, "", 0, ""},
		{"tenant at its services quota", "full", decide.TypeRegisterService, "new", 4, errs.CodeQuotaExceeded, 0, "services"},
		{"tenant within its quota", "roomy", decide.TypeRegisterAgent, "new", 4, "", 1, ""},
		{"services within quota", "roomy", decide.TypeRegisterService, "new", 5, "", 1, ""},
		{"agentbus at its agents in all", "roomy", decide.TypeRegisterAgent, "new", 5, errs.CodeQuotaExceeded, 0, "commandConsumers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			all = tt.all
			data, _ := json.Marshal(map[string]any{"id": tt.id, "name": "x"})
			cmd := decide.Command{Tenant: tt.tenant, CorrelationID: "corr", Type: tt.typ,
				Envelope: &envelope.Envelope{Type: tt.typ, Data: data}}
			d, err := deciders[tt.typ].Decide(context.Background(), cmd, state)
			if err != nil {
				t.Fatal(err)
			}
			if tt.code == "" {
				if d.Reject != nil || len(d.Events) != tt.events {
					t.Fatalf("decided %+v, want %d events", d, tt.events)
				}
				return
			}
			if d.Reject == nil || d.Reject.Code != tt.code {
				t.Fatalf("decided %+v, want %s", d, tt.code)
			}
			if tt.quota != "" && d.Reject.Details["quota"] != tt.quota {
				t.Errorf("details %v, want quota %s", d.Reject.Details, tt.quota)
			}
		})
	}
	if e := (decide.Quotas{Agents: 1}).Exceeded("t", decide.AggAgent); e != nil {
		t.Errorf("quotas without a count refused: %v", e)
	}
}
