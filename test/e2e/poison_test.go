package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
)

// TestStatusLookalikeEventsDoNotStopConsumers: an event published straight
// to NATS with an empty payload and a Status header (what nats.go takes for
// a server's status message on a pull consumer, such as "409 Consumer
// Deleted") does not stop agentbus's consumers: commands submitted after it
// are still processed and indexed, and agents still registered with
// their consumers.
func TestStatusLookalikeEventsDoNotStopConsumers(t *testing.T) {
	t.Parallel()
	s, js := startOnNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lookalikes := [][2]string{{"409", "Consumer Deleted"}, {"409", "Leadership Change"}, {"100", "Idle Heartbeat"}, {"404", "No Messages"}, {"408", "Request Timeout"}, {"400", "Bad Request"}}
	for i, st := range lookalikes {
		subj := "agentbus.evt.default._._.Lookalike"
		if i%2 == 0 { // also where the registries and the agent reconciler read
			subj = "agentbus.evt.default.agent.evil-" + st[0] + ".AgentRegistered"
		}
		m := nats.NewMsg(subj)
		m.Header.Set("Status", st[0])
		m.Header.Set("Description", st[1])
		m.Header.Set("Agentbus-Correlation-Id", "lookalike-"+st[0])
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// Four rounds over more than the control consumer's ack_wait (15 s),
	// the shortest of the consumers the look-alikes reach, so that their
	// redeliveries fall among them.
	for i := range 4 {
		if i > 0 {
			time.Sleep(5100 * time.Millisecond)
		}
		id := "after-lookalike-" + string(rune('a'+i))
		corr := submitCommand(t, s.URL, placeOrder(id))
		eventsOf(t, s.URL, corr, 1)
		// A 201 says the agent is in the registry and the control
		// reactor has created its consumer.
		registerChargeAgent(t, s.URL, id)
		if regConsumer(t, js, "agent_default_"+id) == nil {
			t.Fatalf("round %d: no agent consumer", i)
		}
	}
	// The look-alikes themselves were handled and acked, not left pending.
	testkit.WaitIdle(t, js, testkit.PipelineConsumers("AGENTBUS_EVENTS/control")...)
}

// TestDeletedConsumersAreDeclaredAgain: agentbus's own consumers deleted
// under a running agentbus are declared again from streams/ and followed
// again: a command submitted afterwards is processed and indexed, and an
// agent registered afterwards gets its consumer from the control reactor.
func TestDeletedConsumersAreDeclaredAgain(t *testing.T) {
	t.Parallel()
	s, js := startOnNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eventsOf(t, s.URL, submitCommand(t, s.URL, placeOrder("before-delete")), 1)
	for _, c := range [][2]string{{"AGENTBUS_COMMANDS", "processor"}, {"AGENTBUS_EVENTS", "control"}} {
		if err := js.DeleteConsumer(ctx, c[0], c[1]); err != nil {
			t.Fatalf("delete %s/%s: %v", c[0], c[1], err)
		}
	}
	// The consumers come back within the first pause (1 s), well inside
	// eventsOf's wait.
	corr := submitCommand(t, s.URL, placeOrder("after-delete"))
	if ev := eventsOf(t, s.URL, corr, 1)[0]; ev["type"] != "OrderPlaced" {
		t.Fatalf("event after the consumers were deleted: %v", ev)
	}
	// A 201 says the control reactor created the agent's consumer.
	registerChargeAgent(t, s.URL, "after-delete")
	if regConsumer(t, js, "agent_default_after-delete") == nil {
		t.Fatal("no consumer for the agent registered after the consumers were deleted")
	}
	// Declared from streams/ (20-consumers.yaml, 40-control.yaml), not
	// left to a default.
	for _, c := range []struct {
		stream, name  string
		ackWait       time.Duration
		maxAckPending int
	}{{"AGENTBUS_COMMANDS", "processor", 10 * time.Second, 4096}, {"AGENTBUS_EVENTS", "control", 15 * time.Second, 32}} {
		ci := testkit.ConsumerInfo(t, js, c.stream, c.name)
		if ci == nil {
			t.Fatalf("%s/%s is missing", c.stream, c.name)
		}
		if cfg := ci.Config; cfg.AckWait != c.ackWait || cfg.MaxAckPending != c.maxAckPending {
			t.Errorf("%s/%s declared with ack wait %s, max ack pending %d; want %s and %d as in streams/",
				c.stream, c.name, cfg.AckWait, cfg.MaxAckPending, c.ackWait, c.maxAckPending)
		}
	}
}
