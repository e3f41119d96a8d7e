package e2e_test

import (
	"testing"

	"github.com/agentbus/agentbus/test/testkit"
)

// TestCorrelationLookupUsesTheIndex seeds 20,000 unrelated events, then
// looks a real command's events up by correlation id. The event sits far
// beyond any page a bounded scan would read; and once its receipt (the
// index entry) is gone the lookup finds nothing although the event is
// still in the stream, so the answer came from the index, not a scan.
func TestCorrelationLookupUsesTheIndex(t *testing.T) {
	t.Parallel()
	s := start(t)
	const seeded = 20000
	types := make([]string, seeded)
	for i := range types {
		types[i] = "Seed"
	}
	plSeed(t, s, types)

	id := submitCommand(t, s.URL, placeOrder("o-needle"))
	ev := eventsOf(t, s.URL, id, 1)[0]
	if ev["type"] != "OrderPlaced" {
		t.Fatalf("event %v", ev)
	}
	if n := testkit.StreamState(t, s.Conn.JS, plEvents).Msgs; n != seeded+1 {
		t.Fatalf("event stream holds %d messages, want %d", n, seeded+1)
	}
	if p := plList(t, s, "/events?type=OrderPlaced"); len(p.Events) != 1 || p.Events[0]["id"] != ev["id"] {
		t.Errorf("type filter over the seeded log: %v", plIDs(p.Events))
	}
	if p := plList(t, s, "/events?correlationId="+id+"&type=OrderPlaced"); len(p.Events) != 1 {
		t.Errorf("correlation and type: %d events", len(p.Events))
	}

	kv, err := s.Conn.JS.KeyValue(plCtx(t), "AGENTBUS_RECEIPTS")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(plCtx(t), "default."+id); err != nil {
		t.Fatalf("delete the receipt: %v", err)
	}
	if p := plList(t, s, "/events?correlationId="+id); len(p.Events) != 0 {
		t.Errorf("without its receipt the lookup still found %d events: it scanned the stream", len(p.Events))
	}
}
