package flow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
)

// operation returns the handler of the operation with id.
func (e *natsEnv) operation(id string) func(context.Context, *ops.Request) (*ops.Response, error) {
	e.t.Helper()
	for _, op := range e.app.Operations() {
		if op.ID == id {
			return op.Handle
		}
	}
	e.t.Fatalf("no operation %s", id)
	return nil
}

// publishEvent stores an event message with the given data straight on the
// event log, as any NATS publisher could.
func (e *natsEnv) publishEvent(subject string, hdr bus.Header, data any) {
	e.t.Helper()
	raw, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		e.t.Fatal(err)
	}
	if hdr == nil {
		hdr = bus.Header{}
	}
	if _, err := e.events.Append(e.ctx(), []*bus.Message{{Subject: subject, Header: hdr, Data: raw}}, nil); err != nil {
		e.t.Fatalf("publish event: %v", err)
	}
}

// listed returns the records a list operation answers for tenant.
func listed[T any](e *natsEnv, opID, tenant, field string) []T {
	e.t.Helper()
	resp, err := e.operation(opID)(e.ctx(), &ops.Request{Tenant: tenant})
	if err != nil {
		e.t.Fatalf("%s: %v", opID, err)
	}
	recs, _ := resp.Body.(map[string]any)[field].([]T)
	return recs
}

func agentIDs(agents []decide.Agent) []string {
	var ids []string
	for _, a := range agents {
		ids = append(ids, a.ID)
	}
	return ids
}

// TestRegistrySkipsEventsAgentbusWouldNotWrite: registry records are stored
// under the subject's id, so an event whose subject tenant or id is not
// valid, whose data.id is not the subject's id, or whose registration lists
// something that is not a message type, is skipped, both when
// the log is replayed at start and when it is followed afterwards.
func TestRegistrySkipsEventsAgentbusWouldNotWrite(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	reg := func(id string) map[string]any {
		return map[string]any{"id": id, "name": id, "accepts": []string{}, "produces": []string{}, "createdAt": "2026-01-02T15:04:05Z"}
	}
	// Replayed at start.
	e.publishEvent("agentbus.evt.default.agent.a1.AgentRegistered", nil, reg("other"))
	e.publishEvent("agentbus.evt.default.agent.a%b.AgentRegistered", nil, reg("a%b"))
	e.publishEvent("agentbus.evt.Bad!Tenant.agent.x.AgentRegistered", nil, reg("x"))
	e.publishEvent("agentbus.evt.default.service.s1.ServiceRegistered", nil, reg("s2"))
	wild := reg("wild")
	wild["accepts"] = []string{">"} // not a message type: a consumer filter taking everything
	e.publishEvent("agentbus.evt.default.agent.wild.AgentRegistered", nil, wild)
	e.publishEvent("agentbus.evt.default.agent.good.AgentRegistered", nil, reg("good"))

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := e.app.StartRegistries(ctx); err != nil {
		t.Fatal(err)
	}
	// Followed: changes to good naming another id, a registration naming
	// another id, then a valid registration that shows they were applied.
	e.publishEvent("agentbus.evt.default.agent.good.AgentPaused", nil, map[string]any{"id": "other", "at": "2026-01-02T15:04:06Z"})
	e.publishEvent("agentbus.evt.default.agent.good.AgentDeleted", nil, map[string]any{"at": "2026-01-02T15:04:07Z"})
	e.publishEvent("agentbus.evt.default.agent.late.AgentRegistered", nil, reg("someone"))
	e.publishEvent("agentbus.evt.default.agent.marker.AgentRegistered", nil, reg("marker"))

	deadline := time.Now().Add(10 * time.Second)
	var agents []decide.Agent
	for {
		agents = listed[decide.Agent](e, "listAgents", "default", "agents")
		if slices.Contains(agentIDs(agents), "marker") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ids := agentIDs(agents); !slices.Equal(ids, []string{"good", "marker"}) {
		t.Fatalf("agents %v, want [good marker]", ids)
	}
	if agents[0].Status != decide.AgentActive {
		t.Errorf("good is %s, want %s (its pause named another id)", agents[0].Status, decide.AgentActive)
	}
	if got := listed[decide.Agent](e, "listAgents", "Bad!Tenant", "agents"); len(got) != 0 {
		t.Errorf("tenant Bad!Tenant has agents %v", agentIDs(got))
	}
	if got := listed[decide.Service](e, "listServices", "default", "services"); len(got) != 0 {
		t.Errorf("services %+v, want none", got)
	}
}

// TestControlRejectionCodes: the code of a control command's rejection
// comes from a CommandRejected event, which any NATS publisher can write.
// A code of pkg/errs is answered as is; an unknown or missing one becomes
// INTERNAL_ERROR with a message naming it.
func TestControlRejectionCodes(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil) // no processor runs: the test writes each outcome
	pause := e.operation("pauseAgent")
	tests := []struct {
		name      string
		rejection map[string]any // code and message of the CommandRejected
		code      errs.Code
		message   string
	}{
		{"known", map[string]any{"code": "AGENT_NOT_FOUND", "message": "not here"}, errs.CodeAgentNotFound, "not here"},
		{"unknown", map[string]any{"code": "NOT_A_CODE", "message": "nope"}, errs.CodeInternal,
			`the command was rejected by a processor with an unknown code "NOT_A_CODE": nope`},
		{"missing", map[string]any{"message": "no code"}, errs.CodeInternal,
			`the command was rejected by a processor with an unknown code "": no code`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e.with(t)
			id := fmt.Sprintf("agent-%d", i)
			done := make(chan error, 1)
			go func() {
				_, err := pause(e.ctx(), &ops.Request{Tenant: tenant, Params: map[string][]string{"id": {id}}})
				done <- err
			}()
			corr := e.storedCommand("agentbus.cmd.default.PauseAgent", id)
			data := map[string]any{"commandId": corr, "commandType": "PauseAgent"}
			for k, v := range tt.rejection {
				data[k] = v
			}
			e.publishEvent("agentbus.evt.default._._.CommandRejected", bus.Header{bus.HeaderCorrelationID: {corr}}, data)
			err := <-done
			got := errs.As(err)
			if err == nil || got.Code != tt.code || got.Message != tt.message || got.Details["correlationId"] != corr {
				t.Fatalf("pauseAgent: %v (details %v), want %s: %s", err, got.Details, tt.code, tt.message)
			}
		})
	}
}

// storedCommand waits for the command on subject whose data.id is id and
// returns its correlation id.
func (e *natsEnv) storedCommand(subject, id string) string {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ms, err := e.cmds.Range(e.ctx(), subject, 1, 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, m := range ms {
			var env struct {
				Data struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			if json.Unmarshal(m.Data, &env) == nil && env.Data.ID == id {
				return m.Header.Get(bus.HeaderCorrelationID)
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no command on %s for %s", subject, id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRegisterAgentAcceptingAProcessedType: POST /agents accepting a type
// agentbus processes itself is answered 400 with the violation's path, and
// nothing is stored.
func TestRegisterAgentAcceptingAProcessedType(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	body := `{"id":"taker","name":"Taker","accepts":["ShipOrder","DeleteService","PlaceOrder"]}`
	_, err := e.operation("registerAgent")(e.ctx(), &ops.Request{Tenant: tenant, Body: []byte(body)})
	got := errs.As(err)
	var paths []string
	for _, v := range got.Violations {
		paths = append(paths, v.Path)
	}
	if err == nil || got.Code != errs.CodeValidationFailed || !slices.Equal(paths, []string{"$.accepts.1", "$.accepts.2"}) {
		t.Fatalf("registerAgent: %v, violations %v; want VALIDATION_FAILED at $.accepts.1 and $.accepts.2", err, got.Violations)
	}
	if seq, err := e.cmds.LastSeq(e.ctx()); err != nil || seq != 0 {
		t.Fatalf("command log at %d (%v), want nothing stored", seq, err)
	}
}
