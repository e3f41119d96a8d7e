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
// are still processed and indexed, and agents still registered.
func TestStatusLookalikeEventsDoNotStopConsumers(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	s := start(t, regOn(natsURL))
	js := testkit.JetStream(t, natsURL)
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
	for i := range 3 {
		corr := submitCommand(t, s.URL, placeOrder("after-lookalike-"+string(rune('a'+i))))
		eventsOf(t, s.URL, corr, 1)
		id := "after-lookalike-" + string(rune('a'+i))
		auExpect(t, "register", postJSON(t, s.URL+"/agents", map[string]any{"id": id, "name": id}), 201, "")
		if r := get(t, s.URL+"/agents/"+id); r.Status != 200 {
			t.Fatalf("agent %s after the look-alikes: %d %s", id, r.Status, r.Body)
		}
		time.Sleep(2 * time.Second)
	}
}
