package flow_test

import (
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
)

// TestReconcileSkipsEventsItCannotReconcile: the control reactor takes one
// event at a time, so events it could never reconcile (an agent never
// registered, a subject agentbus would not write) are settled at once
// instead of being retried forever ahead of everything else.
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

// TestReconcileGivesUpOnAnEventInTheEnd: an event that keeps failing is
// retried, and terminated after the bound instead of blocking the reactor.
func TestReconcileGivesUpOnAnEventInTheEnd(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	// A registration written straight to the log, without the command
	// sequence agentbus stamps, naming a command that is not there: its
	// consumer's start cannot be found yet.
	subject := "agentbus.evt.default.agent.orphan.AgentRegistered"
	data := []byte(`{"data":{"id":"orphan","name":"o","accepts":["ShipOrder"],"produces":[]}}`)
	hdr := bus.Header{bus.HeaderCorrelationID: {"no-such-command"}}
	if _, err := e.events.Append(e.ctx(), []*bus.Message{{Subject: subject, Header: hdr, Data: data}}, nil); err != nil {
		t.Fatal(err)
	}
	m, err := e.events.Last(e.ctx(), subject)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		n    uint64
		want string
	}{{1, "nak"}, {19, "nak"}, {20, "term"}} {
		d := &delivery{msg: *m, n: tt.n}
		e.app.ReconcileAgents(e.ctx(), d)
		if how := d.settled(); how != tt.want {
			t.Errorf("delivery %d settled %q, want %q", tt.n, how, tt.want)
		}
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
