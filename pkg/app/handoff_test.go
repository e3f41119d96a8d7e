package app

import (
	"context"
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
			h := &handoff{}
			e := h.offer("c1", raw, env, nil)
			h.settle("c1", e, tt.seq)
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

func TestHandoffWaitsForTheStore(t *testing.T) {
	h := &handoff{}
	raw := []byte(`{}`)
	e := h.offer("c1", raw, &envelope.Envelope{}, nil)
	go func() {
		time.Sleep(20 * time.Millisecond)
		h.settle("c1", e, 3)
	}()
	if _, ok := h.takeFirst(context.Background(), true, "c1", 3, raw); !ok {
		t.Fatal("a delivery that arrives before the store's answer missed the entry")
	}
}

func TestHandoffDisabledAndBounded(t *testing.T) {
	var off *handoff
	if e := off.offer("c", nil, nil, nil); e != nil {
		t.Fatal("disabled handoff offered")
	}
	off.settle("c", nil, 1) // must not panic
	if _, ok := off.takeFirst(context.Background(), true, "c", 1, nil); ok {
		t.Fatal("disabled handoff took")
	}
	h := &handoff{}
	for i := range maxHandoff + 10 {
		e := h.offer(string(rune('a'+i%26))+string(rune(i)), nil, nil, nil)
		h.settle("", e, 1)
	}
	if n := len(h.m); n > maxHandoff {
		t.Fatalf("%d entries held, bound %d", n, maxHandoff)
	}
}
