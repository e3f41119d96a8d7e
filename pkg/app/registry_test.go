package app_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/bus"
)

// operation returns the handler of the operation with id.
func (e *natsEnv) operation(id string) func(context.Context, *app.Request) (*app.Response, error) {
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
	resp, err := e.operation(opID)(e.ctx(), &app.Request{Tenant: tenant})
	if err != nil {
		e.t.Fatalf("%s: %v", opID, err)
	}
	recs, _ := resp.Body.(map[string]any)[field].([]T)
	return recs
}

func agentIDs(agents []app.Agent) []string {
	var ids []string
	for _, a := range agents {
		ids = append(ids, a.ID)
	}
	return ids
}

// TestRegistrySkipsEventsAgentbusWouldNotWrite: registry records are stored
// under the subject's id, so an event whose subject tenant or id is not
// valid, or whose data.id is not the subject's id, is skipped, both when
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
	var agents []app.Agent
	for {
		agents = listed[app.Agent](e, "listAgents", "default", "agents")
		if slices.Contains(agentIDs(agents), "marker") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ids := agentIDs(agents); !slices.Equal(ids, []string{"good", "marker"}) {
		t.Fatalf("agents %v, want [good marker]", ids)
	}
	if agents[0].Status != app.AgentActive {
		t.Errorf("good is %s, want %s (its pause named another id)", agents[0].Status, app.AgentActive)
	}
	if got := listed[app.Agent](e, "listAgents", "Bad!Tenant", "agents"); len(got) != 0 {
		t.Errorf("tenant Bad!Tenant has agents %v", agentIDs(got))
	}
	if got := listed[app.Service](e, "listServices", "default", "services"); len(got) != 0 {
		t.Errorf("services %+v, want none", got)
	}
}
