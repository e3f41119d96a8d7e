package e2e_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/agentbus/agentbus/test/testkit"
)

// TestCorrelationLookupUsesTheIndex seeds 20,000 unrelated events, then
// looks a real command's events up by correlation id. The event sits far
// beyond any page a bounded scan would read; once its receipt is gone
// from the receipts bucket (as past streams.receiptTTL), the replica's
// history on disk still finds it, and an id never submitted finds
// nothing.
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
	// Past the bucket (its TTL ran out, here its key deleted) the
	// replica's history on disk holds the receipt.
	if p := plList(t, s, "/events?correlationId="+id); len(p.Events) != 1 || p.Events[0]["id"] != ev["id"] {
		t.Errorf("without its receipt in the bucket the lookup found %v; want the history's one event", plIDs(p.Events))
	}
	if p := plList(t, s, "/events?correlationId=never-submitted"); len(p.Events) != 0 {
		t.Errorf("a command never submitted: %v", plIDs(p.Events))
	}
}

// TestCorrelationLookupOfAnEventTheStoreLacks: the event log keeps its
// events forever (and refuses deletes), so an event a command's receipt
// lists that the store cannot serve (as a new leader still applying it;
// here one past the log's end) is 503 SERVICE_UNAVAILABLE, to be asked
// again, for pages and traces: never a 200 that leaves the event out.
func TestCorrelationLookupOfAnEventTheStoreLacks(t *testing.T) {
	t.Parallel()
	s := start(t)
	id := submitCommand(t, s.URL, placeOrder("o-missing"))
	eventsOf(t, s.URL, id, 1)
	kv, err := s.Conn.JS.KeyValue(plCtx(t), "AGENTBUS_RECEIPTS")
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(plCtx(t), "default."+id)
	if err != nil {
		t.Fatal(err)
	}
	var receipt map[string]any
	if err := json.Unmarshal(entry.Value(), &receipt); err != nil {
		t.Fatal(err)
	}
	receipt["events"] = append(receipt["events"].([]any), 1<<40) // not stored (yet)
	raw, _ := json.Marshal(receipt)
	if _, err := kv.Put(plCtx(t), "default."+id, raw); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/events?correlationId=" + id, "/traces/" + id} {
		res := get(t, s.URL+path)
		if res.Status != http.StatusServiceUnavailable || res.errorCode(t) != "SERVICE_UNAVAILABLE" {
			t.Errorf("GET %s with an event the store lacks: %d %s, want 503 SERVICE_UNAVAILABLE", path, res.Status, res.Body)
		}
	}
}
