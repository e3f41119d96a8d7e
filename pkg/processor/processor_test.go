package processor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/processor"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// shipOrder is the decider an external program runs for ShipOrder.
var shipOrder = decide.DeciderFunc(func(ctx context.Context, cmd decide.Command, s decide.State) (decide.Decision, error) {
	var in struct {
		OrderID string `json:"orderId"`
		Carrier string `json:"carrier"`
	}
	if err := json.Unmarshal(cmd.Envelope.Data, &in); err != nil {
		return decide.Decision{}, err
	}
	data, _ := json.Marshal(map[string]string{"orderId": in.OrderID, "carrier": in.Carrier, "trackingId": in.Carrier + "-" + in.OrderID})
	return decide.DecideOnAggregate(ctx, cmd, s, catalog.ExpectExists,
		decide.NewEvent{Type: "OrderShipped", AggType: "order", AggID: in.OrderID, Data: data})
})

func TestExternalProcessorHandlesShipOrder(t *testing.T) {
	s := testkit.Agentbus(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- processor.Run(ctx, processor.Config{
			NATS: natsjs.Config{URL: s.Conn.ClientURL()}, Durable: "shipping", Logger: testkit.Logger(),
		}, map[string]decide.Decider{"ShipOrder": shipOrder})
	}()

	submit := func(typ, schema string, data map[string]any) string {
		body, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": typ + "-1", "source": "test", "type": typ,
			"datacontenttype": "application/json", "dataschema": schema, "time": "2026-01-01T00:00:00Z", "data": data})
		res, err := http.Post(s.URL+"/commands", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out struct{ ID string }
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 202 || json.Unmarshal(b, &out) != nil {
			t.Fatalf("submit %s: %d %s", typ, res.StatusCode, b)
		}
		return out.ID
	}
	waitEvent := func(corr string) map[string]any {
		var events []map[string]any
		testkit.Eventually(t, "an event for "+corr, func() bool {
			res, err := http.Get(s.URL + "/events?correlationId=" + corr)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var page struct{ Events []map[string]any }
			_ = json.NewDecoder(res.Body).Decode(&page)
			events = page.Events
			return len(events) > 0
		})
		return events[0]
	}

	waitEvent(submit("PlaceOrder", "place-order/1.0", map[string]any{"orderId": "o-9", "customer": "ada",
		"items": []any{map[string]any{"sku": "A", "quantity": 1}}}))
	ev := waitEvent(submit("ShipOrder", "ship-order/1.0", map[string]any{"orderId": "o-9", "carrier": "dhl"}))
	if ev["type"] != "OrderShipped" || ev["source"] != "agentbus/shipping" {
		t.Fatalf("event = %v", ev)
	}
	if d := ev["data"].(map[string]any); d["trackingId"] != "dhl-o-9" {
		t.Fatalf("data = %v", d)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestRunRefusesTypesOutsideTheCatalogue(t *testing.T) {
	err := processor.Run(context.Background(), processor.Config{
		NATS: natsjs.Config{URL: "nats://127.0.0.1:1"}, Durable: "p",
	}, map[string]decide.Decider{"NoSuchCommand": shipOrder})
	if err == nil || !strings.Contains(err.Error(), `"NoSuchCommand" is not in the catalogue`) {
		t.Fatalf("Run = %v, want a refusal naming the type", err)
	}
}

// TestProcessorRecognisesALateCopy: a copy of a command the processor
// decided, published again past the duplicate window and taken by the
// processor started again (which no longer remembers deciding it), is
// recognised from the processor's history of receipts: no event again.
// With Config.Data the history is the one the processor left on that
// disk; without, one built from the logs at the start.
func TestProcessorRecognisesALateCopy(t *testing.T) {
	for _, kept := range []bool{true, false} {
		name := map[bool]string{true: "Data", false: "no Data"}[kept]
		t.Run(name, func(t *testing.T) {
			var data string
			if kept {
				data = t.TempDir()
			}
			testLateCopy(t, data)
		})
	}
}

func testLateCopy(t *testing.T, data string) {
	s := testkit.Agentbus(t, func(c *settings.Config) { c.Streams.DuplicateWindow = settings.Duration(time.Second) })
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- processor.Run(ctx, processor.Config{
				NATS: natsjs.Config{URL: s.Conn.ClientURL()}, Durable: "shipping", Logger: testkit.Logger(), Data: data,
			}, map[string]decide.Decider{"ShipOrder": shipOrder})
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	js := s.Conn.JS
	shipped := "agentbus.evt.default.order." + bus.ShardOf("o-late") + ".OrderShipped"
	count := func() uint64 {
		st, err := js.Stream(context.Background(), "AGENTBUS_EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(shipped))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[shipped]
	}
	command := func(id, typ, schema string, data map[string]any) map[string]any {
		return map[string]any{"specversion": "1.0", "id": id, "source": "test", "type": typ,
			"datacontenttype": "application/json", "dataschema": schema, "time": "2026-01-01T00:00:00Z", "data": data}
	}
	post := func(env map[string]any) {
		body, _ := json.Marshal(env)
		res, err := http.Post(s.URL+"/commands", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 202 {
			t.Fatalf("submit: %d", res.StatusCode)
		}
	}
	stop := run()
	post(command("place-late", "PlaceOrder", "place-order/1.0", map[string]any{"orderId": "o-late", "customer": "ada",
		"items": []any{map[string]any{"sku": "A", "quantity": 1}}}))
	ship := command("ship-late", "ShipOrder", "ship-order/1.0", map[string]any{"orderId": "o-late", "carrier": "dhl"})
	post(ship)
	testkit.Eventually(t, "OrderShipped", func() bool { return count() == 1 })
	// Another command on the order after it: the order's last event is no
	// longer the copy's, which would tell the processor by itself.
	post(command("ship-again", "ShipOrder", "ship-order/1.0", map[string]any{"orderId": "o-late", "carrier": "ups"}))
	testkit.Eventually(t, "the second OrderShipped", func() bool { return count() == 2 })
	time.Sleep(100 * time.Millisecond) // the history writes what it took in
	stop()

	corr := envelope.CorrelationID("default", "test", "ship-late")
	time.Sleep(1500 * time.Millisecond) // past the duplicate window
	raw, _ := json.Marshal(ship)
	ack, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: "agentbus.cmd.default.ShipOrder", Data: raw,
		Header: nats.Header{"Nats-Msg-Id": {corr}, "Agentbus-Correlation-Id": {corr}}})
	if err != nil {
		t.Fatal(err)
	}
	if ack.Duplicate {
		t.Fatal("the copy was taken for a duplicate: the window has not passed")
	}
	stop = run()
	defer stop()
	testkit.Eventually(t, "the processor took the copy", func() bool {
		c, err := js.Consumer(context.Background(), "AGENTBUS_COMMANDS", "shipping")
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.AckFloor.Stream >= ack.Sequence
	})
	if n := count(); n != 2 {
		t.Fatalf("%d OrderShipped after the late copy; want 2", n)
	}
}
