package webhook

import (
	"strconv"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
)

// TestRecent: recent answers with the next matching events after a
// sequence only while it holds every event after it, and drops the
// oldest past its bounds.
func TestRecent(t *testing.T) {
	r := newRecent(10)
	ev := func(seq uint64, tenant, typ string, size int) *item {
		return &item{eventSeq: seq, m: &bus.Message{Seq: seq, Subject: "p.evt." + tenant + "._._." + typ, Data: make([]byte, size)}}
	}
	for seq := uint64(10); seq < 20; seq++ {
		tenant := "a"
		if seq%2 == 1 {
			tenant = "b"
		}
		r.add(ev(seq, tenant, "T"+strconv.FormatUint(seq%3, 10), 10))
	}
	get := func(seq, skip uint64, filters []string, max, maxBytes int) (out []uint64) {
		its, _, _ := r.after(seq, skip, filters, max, maxBytes)
		for _, it := range its {
			out = append(out, it.eventSeq)
		}
		return out
	}
	a := []string{"p.evt.a.>"}
	if got := get(8, 0, a, 10, 1<<20); got != nil {
		t.Fatalf("after 8 (not all held): %v", got)
	}
	if got := get(9, 0, a, 3, 1<<20); len(got) != 3 || got[0] != 10 || got[2] != 14 {
		t.Fatalf("after 9, tenant a, 3: %v", got)
	}
	if got := get(12, 0, []string{"p.evt.b.*.*.T0", "p.evt.a.*.*.T1"}, 10, 1<<20); len(got) != 2 || got[0] != 15 || got[1] != 16 {
		t.Fatalf("after 12, two types: %v", got)
	}
	if got := get(11, 0, a, 10, 25); len(got) != 2 {
		t.Fatalf("after 11 within 25 bytes: %v", got)
	}
	if got := get(19, 0, a, 10, 1<<20); got != nil {
		t.Fatalf("after the last: %v", got)
	}
	// A search that finds nothing says how far it looked; the next one
	// starts there.
	none := []string{"p.evt.c.>"}
	if its, last, held := r.after(9, 0, none, 10, 1<<20); its != nil || last != 19 || !held {
		t.Fatalf("nothing for c: %v, looked up to %d, all held %v", its, last, held)
	}
	if _, _, held := r.after(8, 0, none, 10, 1<<20); held {
		t.Fatal("after 8: all held")
	}
	if got := get(9, 15, a, 10, 1<<20); len(got) != 2 || got[0] != 16 {
		t.Fatalf("after 9 skipping to 15: %v", got)
	}
	for seq := uint64(20); seq < 20+recentMax; seq++ {
		r.add(ev(seq, "a", "T", 1))
	}
	if r.n != recentMax || r.from != 20 {
		t.Fatalf("held %d from %d", r.n, r.from)
	}
	if got := get(18, 0, a, 1, 1<<20); got != nil {
		t.Fatalf("after a dropped event: %v", got)
	}
	if got := get(19, 0, a, 1, 1<<20); len(got) != 1 || got[0] != 20 {
		t.Fatalf("after 19: %v", got)
	}
	r.add(ev(20+recentMax, "a", "T", recentBytes))
	if r.n != 1 || r.from != 20+recentMax {
		t.Fatalf("after a large event: held %d from %d", r.n, r.from)
	}
}
