package flow_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/reconcile"
)

// TestReconcileSkipsEventsItCannotReconcile: events the control reactor
// could never reconcile (an agent never registered, a subject agentbus
// would not write) are settled at once instead of being retried.
func TestReconcileSkipsEventsItCannotReconcile(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	for _, subject := range []string{
		"agentbus.evt.default.agent.ghost.AgentPaused", // never registered
		"agentbus.evt.Bad!Tenant.agent.x.AgentPaused",  // not a tenant id
		"agentbus.evt.default.agent.a%b.AgentResumed",  // not an agent id
	} {
		t.Run(subject, func(t *testing.T) {
			_, err := e.events.Append(e.ctx(), []*bus.Message{{Subject: subject, Header: bus.Header{}, Data: []byte(`{}`)}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if how := reconcileLast(t, e, subject); how != "ack" {
				t.Fatalf("settled %q, want ack", how)
			}
		})
	}
}

// reconcileLast hands the last event on subject to the control reactor,
// as its first delivery, and returns how the reactor settled it.
func reconcileLast(t *testing.T, e *natsEnv, subject string) string {
	t.Helper()
	m, err := e.events.Last(e.ctx(), subject)
	if err != nil {
		t.Fatal(err)
	}
	d := &delivery{msg: *m, n: 1}
	e.app.ReconcileAgents(e.ctx(), d)
	return d.settled()
}

// TestReconcileRetriesOffTheConsumerThenRecords: an event that keeps
// failing is acked at once, so that it holds up no other agent's event
// on the control consumer, and tried again off it with a backoff; after
// the last try its failure is recorded: AgentConsumerFailed after the
// registration, in the trace of the command that registered the agent,
// and the agent's record says "failed", and why.
func TestReconcileRetriesOffTheConsumerThenRecords(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, func(n *node) {
		n.agents.SetRetry(reconcile.Retry{Attempts: 3, Backoff: func(uint64) time.Duration { return 20 * time.Millisecond }, Workers: 2})
	})
	if err := e.app.StartRegistries(e.ctx()); err != nil {
		t.Fatal(err)
	}
	// A registration written straight to the log, without the command
	// sequence agentbus stamps, naming a command that is not there: its
	// consumer's start cannot be found.
	subject := "agentbus.evt.default.agent.orphan.AgentRegistered"
	e.publishEvent(subject, bus.Header{bus.HeaderCorrelationID: {"no-such-command"}},
		map[string]any{"id": "orphan", "name": "o", "accepts": []string{"ShipOrder"}, "produces": []string{}})
	if how := reconcileLast(t, e, subject); how != "ack" {
		t.Fatalf("first delivery settled %q, want ack", how)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.app.agents.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })

	var last *bus.Message
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := e.events.Last(e.ctx(), "agentbus.evt.default.agent.orphan.*")
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(m.Subject, ".AgentConsumerFailed") {
			last = m
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no AgentConsumerFailed after the retries; last event %s", m.Subject)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c := last.Header.Get(bus.HeaderCorrelationID); c != "no-such-command" {
		t.Errorf("the failure is an event of command %q, want the registration's", c)
	}
	var env struct {
		Data decide.ConsumerFailure `json:"data"`
	}
	if err := json.Unmarshal(last.Data, &env); err != nil || env.Data.ID != "orphan" || env.Data.Status != decide.AgentActive || env.Data.Error == "" {
		t.Fatalf("failure data %s (%v)", last.Data, err)
	}
	if err := e.app.regs.Agents.WaitApplied(e.ctx(), last.Seq); err != nil {
		t.Fatal(err)
	}
	rec, ok := e.app.regs.Agents.Get("default", "orphan")
	if !ok || rec.Status != decide.AgentFailed || rec.Error != env.Data.Error {
		t.Fatalf("record %+v, want failed with %q", rec, env.Data.Error)
	}
	// Only once: the retries stopped.
	time.Sleep(200 * time.Millisecond)
	if m, _ := e.events.Last(e.ctx(), "agentbus.evt.default.agent.orphan.*"); m.Seq != last.Seq {
		t.Fatalf("another event after the failure: %s", m.Subject)
	}
}

// TestReconcileRefusesRegistrationTypesAgentbusWouldNotWrite: the types a
// registration accepts become the agent consumer's filters, and any NATS
// publisher can append a registration to the log: one whose accepts are
// not message types (a wildcard would take every command of the tenant)
// gets no consumer, while the same registration with valid types does.
func TestReconcileRefusesRegistrationTypesAgentbusWouldNotWrite(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	consumers := e.conn.Consumers(e.names.Commands)
	for _, tt := range []struct {
		id       string
		accepts  []string
		consumer bool
	}{
		{"wild", []string{">"}, false},
		{"star", []string{"ShipOrder", "*"}, false},
		{"fine", []string{"ShipOrder"}, true},
	} {
		t.Run(tt.id, func(t *testing.T) {
			subject := "agentbus.evt.default.agent." + tt.id + ".AgentRegistered"
			e.publishEvent(subject, bus.Header{bus.HeaderCommandSeq: {"1"}},
				map[string]any{"id": tt.id, "name": tt.id, "accepts": tt.accepts, "produces": []string{}})
			if how := reconcileLast(t, e, subject); how != "ack" {
				t.Fatalf("settled %q, want ack", how)
			}
			_, err := consumers.Consumer(e.ctx(), "agent_default_"+tt.id)
			if got := err == nil; got != tt.consumer {
				t.Errorf("consumer exists: %v (%v), want %v", got, err, tt.consumer)
			}
		})
	}
}

// TestReconcileRegistrationNamingNoCommand: a registration published
// straight to NATS without a correlation id (or with one that is not an
// id) names no command to start its consumer after: the consumer starts at
// the event's time, at once, instead of the reactor retrying it ahead of
// everything else.
func TestReconcileRegistrationNamingNoCommand(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	consumers := e.conn.Consumers(e.names.Commands)
	for id, hdr := range map[string]bus.Header{
		"bare":   {},
		"badcor": {bus.HeaderCorrelationID: {"not an id"}},
	} {
		subject := "agentbus.evt.default.agent." + id + ".AgentRegistered"
		e.publishEvent(subject, hdr, map[string]any{"id": id, "name": id, "accepts": []string{"ShipOrder"}, "produces": []string{}})
		if how := reconcileLast(t, e, subject); how != "ack" {
			t.Fatalf("%s: settled %q, want ack", id, how)
		}
		if _, err := consumers.Consumer(e.ctx(), "agent_default_"+id); err != nil {
			t.Errorf("%s: consumer: %v", id, err)
		}
	}
}
