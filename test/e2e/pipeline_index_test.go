package e2e_test

import (
	"net/http"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/localstore/localstoretest"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestCorrelationLookupUsesTheIndex seeds 20,000 unrelated events, then
// looks a real command's events up by correlation id. The event sits far
// beyond any page a bounded scan would read; the replica's history on
// disk finds it, and an id never submitted finds nothing.
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

	// The receipt the lookup read is the history's, on this replica's
	// disk: it lists the event's sequence.
	r, err := s.History.Get("default", id)
	if err != nil {
		t.Fatalf("the history's receipt: %v", err)
	}
	if seq := testkit.StreamState(t, s.Conn.JS, plEvents).LastSeq; len(r.Events) != 1 || r.Events[0] != seq {
		t.Errorf("the history's receipt lists events %v; want the last one stored, %d", r.Events, seq)
	}
	if p := plList(t, s, "/events?correlationId="+id); len(p.Events) != 1 || p.Events[0]["id"] != ev["id"] {
		t.Errorf("the lookup found %v; want the history's one event", plIDs(p.Events))
	}
	if p := plList(t, s, "/events?correlationId=never-submitted"); len(p.Events) != 0 {
		t.Errorf("a command never submitted: %v", plIDs(p.Events))
	}
}

// TestCorrelationLookupOfAnEventTheStoreLacks: the event log keeps its
// events forever (and refuses deletes), so an event a command's receipt
// lists that the store cannot serve (as a new leader still applying it;
// here one past the log's end, written into the replica's history on
// disk while it was stopped) is 503 SERVICE_UNAVAILABLE, to be asked
// again, for pages and traces: never a 200 that leaves the event out.
func TestCorrelationLookupOfAnEventTheStoreLacks(t *testing.T) {
	t.Parallel()
	d := newDiskReplica(t)
	s := d.start()
	id := submitCommand(t, s.URL, placeOrder("o-missing"))
	other := submitCommand(t, s.URL, placeOrder("o-present"))
	eventsOf(t, s.URL, id, 1)
	eventsOf(t, s.URL, other, 1)
	d.stop(s)
	addEventOnDisk(t, d.index(), "default", id, 1<<40) // not stored (yet)
	s = d.start()
	for _, path := range []string{"/events?correlationId=" + id, "/traces/" + id} {
		res := get(t, s.URL+path)
		if res.Status != http.StatusServiceUnavailable || res.errorCode(t) != "SERVICE_UNAVAILABLE" {
			t.Errorf("GET %s with an event the store lacks: %d %s, want 503 SERVICE_UNAVAILABLE", path, res.Status, res.Body)
		}
	}
	// Another command's, whose events the store has, is answered.
	for _, path := range []string{"/events?correlationId=" + other, "/traces/" + other} {
		if res := get(t, s.URL+path); res.Status != http.StatusOK {
			t.Errorf("GET %s: %d %s, want 200", path, res.Status, res.Body)
		}
	}
}

// addEventOnDisk adds seq to the events the receipt of (tenant, corr)
// lists in the history in the read models on disk at index, of a stopped
// replica. The key is the events' part of the receipt as pkg/projection
// lays it out (ondisk.go: 'r', 0, tenant.corr, 0, "e"); it fails t when
// there is no such part.
func addEventOnDisk(t *testing.T, index, tenant, corr string, seq uint64) {
	t.Helper()
	disk := localstoretest.Open(t, index)
	defer disk.Close() // before the replica starts again on it
	key := []byte("r\x00" + projection.Key(tenant, corr) + "\x00e")
	raw, ok, err := disk.Get(key)
	if err != nil || !ok {
		t.Fatalf("the events' part of the receipt of %s on disk: %v %v", corr, ok, err)
	}
	var r projection.Receipt
	if err := projection.ReadReceiptPart(raw, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Events) == 0 {
		t.Fatalf("the receipt of %s on disk lists no event: %s", corr, raw)
	}
	r.Events = append(r.Events, seq)
	if err := disk.Write([]bus.DiskWrite{{Key: key, Val: projection.AppendReceiptPart(nil, &r)}}); err != nil {
		t.Fatal(err)
	}
}
