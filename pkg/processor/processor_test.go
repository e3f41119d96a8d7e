package processor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/processor"
	"github.com/agentbus/agentbus/test/testkit"
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
