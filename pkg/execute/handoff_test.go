package execute

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
)

func TestHandoffTakeFirst(t *testing.T) {
	ctx := context.Background()
	raw := []byte(`{"id":"1"}`)
	env := &envelope.Envelope{ID: "1", Type: "AddNote"}
	tests := []struct {
		name  string
		first bool
		seq   uint64 // stored at
		got   uint64 // delivered seq
		data  []byte
		want  bool
	}{
		{"first delivery of the stored message", true, 7, 7, raw, true},
		{"a redelivery", false, 7, 7, raw, false},
		{"another message with the same correlation id", true, 7, 8, raw, false},
		{"other bytes", true, 7, 7, []byte(`{"id":"2"}`), false},
		{"not stored as new (duplicate or failure)", true, 0, 7, raw, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHandoff()
			e := h.Offer("c1", raw, env, nil)
			h.Settle(e, tt.seq)
			got, ok := h.takeFirst(ctx, tt.first, "c1", tt.got, tt.data)
			if ok != tt.want || (ok && got.env != env) {
				t.Fatalf("takeFirst = %v, %v; want ok %v", got, ok, tt.want)
			}
			if tt.first {
				// Taken or not, an entry serves one delivery only.
				if _, ok := h.takeFirst(ctx, true, "c1", tt.got, tt.data); ok {
					t.Error("entry taken twice")
				}
			}
		})
	}
}

// handoffHolds reports whether h still holds an entry for corr.
func handoffHolds(h *Handoff, corr string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.entries.has(corr)
}

func TestHandoffWaitsForTheStore(t *testing.T) {
	h := NewHandoff()
	raw := []byte(`{}`)
	e := h.Offer("c1", raw, &envelope.Envelope{}, nil)
	took := make(chan bool, 1)
	go func() {
		_, ok := h.takeFirst(context.Background(), true, "c1", 3, raw)
		took <- ok
	}()
	// takeFirst removes the entry before it waits: settle only then.
	for handoffHolds(h, "c1") {
		time.Sleep(time.Millisecond)
	}
	h.Settle(e, 3)
	if !<-took {
		t.Fatal("a delivery that arrives before the store's answer missed the entry")
	}
}

func TestHandoffWaitIsBounded(t *testing.T) {
	h := NewHandoff()
	raw := []byte(`{}`)
	h.Offer("c1", raw, &envelope.Envelope{}, nil) // never settled
	took := make(chan bool, 1)
	go func() {
		_, ok := h.takeFirst(context.Background(), true, "c1", 3, raw)
		took <- ok
	}()
	select {
	case ok := <-took:
		if ok {
			t.Fatal("an unsettled entry was taken")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("takeFirst waits for a store answer that never comes")
	}
}

func TestHandoffDisabledAndBounded(t *testing.T) {
	var off *Handoff
	if e := off.Offer("c", nil, nil, nil); e != nil {
		t.Fatal("disabled handoff offered")
	}
	off.Settle(nil, 1) // must not panic
	if _, ok := off.takeFirst(context.Background(), true, "c", 1, nil); ok {
		t.Fatal("disabled handoff took")
	}

	h := NewHandoff()
	for i := range 3 * maxHandoff {
		h.Settle(h.Offer("c"+strconv.Itoa(i), nil, nil, nil), 1)
	}
	if n := h.entries.len(); n > 2*maxHandoff {
		t.Fatalf("%d entries held, bound %d", n, 2*maxHandoff)
	}
	if !handoffHolds(h, "c"+strconv.Itoa(3*maxHandoff-1)) {
		t.Error("the newest entry was dropped")
	}

	big := make([]byte, maxHandoffBytes/4)
	h = NewHandoff()
	for i := range 20 {
		h.Offer("b"+strconv.Itoa(i), big, nil, nil)
	}
	held := 0
	for _, m := range []map[string]recentEntry[*Handed]{h.entries.cur, h.entries.prev} {
		for _, e := range m {
			held += len(e.v.raw)
		}
	}
	if held > 2*maxHandoffBytes {
		t.Fatalf("%d bytes held, bound %d", held, 2*maxHandoffBytes)
	}
}

// TestHandoffCountsTheBytesItHolds: the byte count of the current
// generation is what its entries hold, also after the same command was
// offered twice and after entries were removed.
func TestHandoffCountsTheBytesItHolds(t *testing.T) {
	h := NewHandoff()
	raw := make([]byte, 100)
	first := h.Offer("same", raw, nil, nil)
	h.Offer("same", raw, nil, nil) // submitted twice at once
	h.Offer("other", raw, nil, nil)
	h.Settle(first, 0) // the first copy was not stored as new: nothing removed, it was replaced
	held := 0
	for _, e := range h.entries.cur {
		held += len(e.v.raw)
	}
	if h.entries.curSize != held {
		t.Fatalf("curSize %d, entries hold %d", h.entries.curSize, held)
	}
}
