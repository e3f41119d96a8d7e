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

// failedAt is the AgentConsumerFailed event of agent id failing while it
// was status.
func failedAt(id, status string) *bus.Message {
	data, _ := json.Marshal(map[string]any{"data": decide.ConsumerFailure{ID: id, At: "2026-01-02T15:04:05Z", Status: status, Error: "no room"}})
	return &bus.Message{Seq: 9, Subject: bus.Subjects{Prefix: "agentbus"}.Event(bus.RootEvents, "t", "agent", id, decide.TypeAgentConsumerFailed),
		Header: bus.Header{bus.HeaderCorrelationID: {"earlier"}}, Data: data}
}

// TestChangesOfAFailedAgent: an agent whose consumer failed is still
// registered, and paused or not as it was when its consumer failed: pause
// and resume are decided on that, and the registry record says "failed"
// until the next change.
func TestChangesOfAFailedAgent(t *testing.T) {
	subj := bus.Subjects{Prefix: "agentbus"}
	state := lastEvents{subj.Aggregate("t", "agent", "was-active"): failedAt("was-active", decide.AgentActive),
		subj.Aggregate("t", "agent", "was-paused"): failedAt("was-paused", decide.AgentPaused)}
	deciders := decide.ControlPlane{Subjects: subj}.Deciders()
	tests := []struct {
		typ, id string
		code    errs.Code // "" = decided, with event want
		want    string
	}{
		{decide.TypePauseAgent, "was-active", "", decide.TypeAgentPaused},
		{decide.TypeResumeAgent, "was-active", errs.CodeAgentNotPaused, ""},
		{decide.TypePauseAgent, "was-paused", errs.CodeAgentAlreadyPaused, ""},
		{decide.TypeResumeAgent, "was-paused", "", decide.TypeAgentResumed},
		{decide.TypeDeleteAgent, "was-paused", "", decide.TypeAgentDeleted},
		{decide.TypeRegisterAgent, "was-active", errs.CodeAgentAlreadyRegistered, ""},
	}
	for _, tt := range tests {
		data, _ := json.Marshal(map[string]any{"id": tt.id, "name": "x"})
		cmd := decide.Command{Tenant: "t", CorrelationID: "corr", Type: tt.typ, Envelope: &envelope.Envelope{Type: tt.typ, Data: data}}
		d, err := deciders[tt.typ].Decide(context.Background(), cmd, state)
		switch {
		case err != nil:
			t.Fatalf("%s %s: %v", tt.typ, tt.id, err)
		case tt.code != "" && (d.Reject == nil || d.Reject.Code != tt.code):
			t.Errorf("%s %s: decided %+v, want %s", tt.typ, tt.id, d, tt.code)
		case tt.code == "" && (d.Reject != nil || len(d.Events) != 1 || d.Events[0].Type != tt.want || d.Expect.LastSeq != 9):
			t.Errorf("%s %s: decided %+v, want %s after 9", tt.typ, tt.id, d, tt.want)
		}
	}

	rec := &decide.Agent{ID: "a", Status: decide.AgentActive, Accepts: []string{"ShipOrder"}}
	failed, ok := decide.FoldAgent(rec, "a", decide.TypeAgentConsumerFailed, json.RawMessage(`{"id":"a","at":"2026-01-02T15:04:05Z","status":"active","error":"no room"}`))
	if !ok || failed.Status != decide.AgentFailed || failed.Error != "no room" || failed.UpdatedAt != "2026-01-02T15:04:05Z" {
		t.Fatalf("folded %+v", failed)
	}
	if _, ok := decide.FoldAgent(rec, "a", decide.TypeAgentConsumerFailed, json.RawMessage(`{"id":"b","status":"active"}`)); ok {
		t.Error("a failure naming another agent was folded")
	}
	paused, _ := decide.FoldAgent(failed, "a", decide.TypeAgentPaused, json.RawMessage(`{"id":"a","at":"2026-01-02T15:05:00Z"}`))
	if paused.Status != decide.AgentPaused || paused.Error != "" {
		t.Fatalf("after a pause: %+v", paused)
	}
}
