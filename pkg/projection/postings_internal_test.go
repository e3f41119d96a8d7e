package projection

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPostingsHoldWhatWasAdded adds sequences with gaps from one to
// millions across several blocks and reads them back from many points.
func TestPostingsHoldWhatWasAdded(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var p postings
	var want []uint64
	seq := uint64(0)
	for i := range 1000 {
		gap := uint64(1 + r.IntN(5))
		if i%97 == 0 {
			gap = 1 << (10 + r.IntN(20)) // a rare type's long silence
		}
		seq += gap
		p.add(seq)
		want = append(want, seq)
	}
	if len(p.blocks) != 1000/postingsBlock || len(p.tail) != 1000%postingsBlock {
		t.Fatalf("%d blocks and %d in the tail; want %d and %d", len(p.blocks), len(p.tail), 1000/postingsBlock, 1000%postingsBlock)
	}
	afters := []uint64{0, want[0] - 1, want[0], want[127], want[128], want[500] - 1, want[999] - 1, want[999], want[999] + 10}
	for range 50 {
		afters = append(afters, uint64(r.Int64N(int64(seq+2))))
	}
	for _, after := range afters {
		var got []uint64
		for c := p.from(after); c.ok(); c.next() {
			got = append(got, c.peek())
		}
		i, _ := slices.BinarySearch(want, after+1)
		if !slices.Equal(got, want[i:]) {
			t.Fatalf("from %d: %d sequences, want %d", after, len(got), len(want)-i)
		}
	}
}

func TestEmptyPostings(t *testing.T) {
	var p postings
	if c := p.from(0); c.ok() {
		t.Fatal("an empty list holds a sequence")
	}
}
