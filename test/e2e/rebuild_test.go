package e2e_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestReceiptsRebuildFromTheLogs: the receipts are a projection of the
// command and event logs. With agentbus stopped, deleting the receipts
// bucket and the receipts consumers, and starting again, rebuilds every
// receipt whose command's events are still stored: the correlation lookup
// and the trace answer as before.
func TestReceiptsRebuildFromTheLogs(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	on := func(c *settings.Config) { c.NATS.URL = natsURL }
	s := start(t, on)
	var corrs []string
	for _, id := range []string{"o-r1", "o-r2", "o-r3"} {
		corrs = append(corrs, submitCommand(t, s.URL, placeOrder(id)))
	}
	dup := submitCommand(t, s.URL, placeOrder("o-r1")) // rejected: the order exists
	before := map[string]string{}
	for _, c := range append(corrs, dup) {
		eventsOf(t, s.URL, c, 1)
		before[c] = string(get(t, s.URL+"/traces/"+c).Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	js := testkit.JetStream(t, natsURL)
	if err := js.DeleteKeyValue(ctx, "AGENTBUS_RECEIPTS"); err != nil {
		t.Fatalf("delete the receipts bucket: %v", err)
	}
	for _, stream := range []string{"AGENTBUS_COMMANDS", "AGENTBUS_EVENTS"} {
		if err := js.DeleteConsumer(ctx, stream, "receipts"); err != nil {
			t.Fatalf("delete the receipts consumer of %s: %v", stream, err)
		}
	}
	s = start(t, on)
	for _, c := range append(corrs, dup) {
		eventsOf(t, s.URL, c, 1)
		testkit.Eventually(t, "the trace of "+c+" as before", func() bool {
			r := get(t, s.URL+"/traces/"+c)
			return r.Status == 200 && sameTrace(t, before[c], string(r.Body))
		})
	}
}

// sameTrace reports whether two trace bodies say the same but for when
// they were last updated.
func sameTrace(t *testing.T, a, b string) bool {
	t.Helper()
	norm := func(s string) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("trace %s: %v", s, err)
		}
		delete(m, "updatedAt")
		out, _ := json.Marshal(m)
		return string(out)
	}
	return norm(a) == norm(b)
}
