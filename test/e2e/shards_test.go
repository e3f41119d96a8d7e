package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAggregatesInShardsAcrossReplicas: two replicas take commands on
// many orders at once, new ones and contended ones, each replica appending
// to the same shards. Every order's rule holds as with a subject per
// aggregate (placed once, cancelled only once placed, a second PlaceOrder
// rejected), while the event log's subjects stay within the shards: the
// NATS server keeps no subject per order.
func TestAggregatesInShardsAcrossReplicas(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	on := func(c *settings.Config) { c.NATS.URL = natsURL }
	replicas := []*server.Server{start(t, on), start(t, on)}
	const orders, contended, tries = 160, 8, 6
	type sent struct {
		order, corr string
	}
	var (
		mu              sync.Mutex
		placed, cancels []sent
		contendedCorrs  = map[string][]string{}
		wg              sync.WaitGroup
		submitOn        = func(i int) *server.Server { return replicas[i%len(replicas)] }
		submit          = func(s *server.Server, env map[string]any) (string, bool) {
			status, id, err := plTry(s, env)
			if err != nil || status != 202 {
				t.Errorf("submit %v: %d %v", env["type"], status, err)
				return "", false
			}
			return id, true
		}
	)
	for i := range orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := fmt.Sprintf("o-shard-%d", i)
			corr, ok := submit(submitOn(i), placeOrder(order))
			if !ok {
				return
			}
			mu.Lock()
			placed = append(placed, sent{order, corr})
			mu.Unlock()
			if i%2 == 0 {
				// Cancelled on the other replica once placed.
				eventsOf(t, submitOn(i).URL, corr, 1)
				c, ok := submit(submitOn(i+1), command("CancelOrder", "cancel-order/1.0", map[string]any{"orderId": order, "reason": "r"}))
				if ok {
					mu.Lock()
					cancels = append(cancels, sent{order, c})
					mu.Unlock()
				}
			}
		}()
	}
	for i := range contended {
		for j := range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				order := fmt.Sprintf("o-contended-%d", i)
				env := placeOrder(order)
				env["data"].(map[string]any)["customer"] = fmt.Sprint("customer-", j)
				if corr, ok := submit(submitOn(j), env); ok {
					mu.Lock()
					contendedCorrs[order] = append(contendedCorrs[order], corr)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	base := replicas[0].URL
	for _, p := range placed {
		if ev := eventsOf(t, base, p.corr, 1)[0]; ev["type"] != "OrderPlaced" {
			t.Errorf("PlaceOrder %s: %v", p.order, ev)
		}
	}
	for _, c := range cancels {
		if ev := eventsOf(t, base, c.corr, 1)[0]; ev["type"] != "OrderCancelled" {
			t.Errorf("CancelOrder %s: %v", c.order, ev)
		}
	}
	js := replicas[0].Conn.JS
	for order, corrs := range contendedCorrs {
		won := 0
		for _, corr := range corrs {
			switch ev := eventsOf(t, base, corr, 1)[0]; ev["type"] {
			case "OrderPlaced":
				won++
			case "CommandRejected":
				if _, _, code, _ := plRejection(t, ev); code != "AGGREGATE_ALREADY_EXISTS" {
					t.Errorf("%s: rejected with %s", order, code)
				}
			default:
				t.Errorf("%s: %v", order, ev)
			}
		}
		if won != 1 {
			t.Errorf("%s: placed %d times of %d, want once", order, won, len(corrs))
		}
		if n := testkit.AggregateMsgs(t, js, plEvents, "default", "order", order); n != 1 {
			t.Errorf("%s has %d events, want 1", order, n)
		}
	}
	for _, c := range cancels {
		if n := testkit.AggregateMsgs(t, js, plEvents, "default", "order", c.order); n != 2 {
			t.Errorf("%s has %d events, want 2 (placed, cancelled)", c.order, n)
		}
	}
	// The orders' events are on the shards' subjects, each with its id.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, plEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("agentbus.evt.default.order.>"))
	if err != nil {
		t.Fatal(err)
	}
	if got, most := len(info.State.Subjects), 2*bus.AggregateShards; got > most || got < 2 {
		t.Errorf("the orders' events are on %d subjects; want 2 to %d (shards × event types) for %d orders", got, most, orders+contended)
	}
	subj := bus.Subjects{Prefix: "agentbus"}
	for s := range info.State.Subjects {
		if _, _, token, _, ok := subj.ParseEvent(s); !ok || !bus.IsShard(token) {
			t.Errorf("an order's event on %s, not on a shard's subject", s)
		}
	}
}

// TestAggregatesOfTheFormerLayout: events stored with the aggregate id in
// the subject (NATS contract version 1) still make their aggregates exist,
// for a running replica and for one whose aggregate index is built from
// the log at its first start; the aggregate's next event goes on its
// shard's subject.
func TestAggregatesOfTheFormerLayout(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	on := func(c *settings.Config) { c.NATS.URL = natsURL }
	s1 := start(t, on)
	js := s1.Conn.JS
	for _, order := range []string{"o-v1a", "o-v1b"} {
		m := nats.NewMsg("agentbus.evt.default.order." + order + ".OrderPlaced")
		m.Data = plEvent("placed-"+order, "OrderPlaced", map[string]any{"orderId": order, "customer": "ada"})
		m.Header.Set("Nats-Msg-Id", "placed-"+order)
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	s2 := start(t, on) // a fresh replica: its index is built from the log
	if ev := eventsOf(t, s1.URL, submitCommand(t, s1.URL, placeOrder("o-v1a")), 1)[0]; ev["type"] != "CommandRejected" {
		t.Errorf("PlaceOrder of an order placed under the former layout: %v", ev)
	} else if _, _, code, _ := plRejection(t, ev); code != "AGGREGATE_ALREADY_EXISTS" {
		t.Errorf("PlaceOrder of an order placed under the former layout: rejected with %s", code)
	}
	cancel := command("CancelOrder", "cancel-order/1.0", map[string]any{"orderId": "o-v1b", "reason": "r"})
	if ev := eventsOf(t, s2.URL, submitCommand(t, s2.URL, cancel), 1)[0]; ev["type"] != "OrderCancelled" {
		t.Errorf("CancelOrder of an order placed under the former layout, on a fresh replica: %v", ev)
	}
	if n := testkit.AggregateMsgs(t, js, plEvents, "default", "order", "o-v1b"); n != 1 {
		t.Errorf("o-v1b has %d events on its shard's subjects, want 1 (the cancel)", n)
	}
	if n := testkit.SubjectMsgs(t, js, plEvents, "agentbus.evt.default.order.o-v1b.*"); n != 1 {
		t.Errorf("o-v1b has %d events on its former subject, want 1 (the placing)", n)
	}
}
