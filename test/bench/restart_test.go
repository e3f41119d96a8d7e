package main

import (
	"slices"
	"testing"
)

// TestRestartSample: round 0 is k distinct commands of 0..n-1, the
// oldest first and the newest among them, rounds 1 and 2 k-1 each, and no
// two rounds share a command, so a later round reads no receipt an
// earlier one read.
func TestRestartSample(t *testing.T) {
	const n, k = 10_000_000, 500
	seen := map[int]int{}
	for round := range 3 {
		idx := restartSample(n, k, round)
		if want := k - min(round, 1); len(idx) != want {
			t.Fatalf("round %d: %d commands, want %d", round, len(idx), want)
		}
		for _, i := range idx {
			if i < 0 || i >= n {
				t.Fatalf("round %d: command %d outside 0..%d", round, i, n-1)
			}
			if r, ok := seen[i]; ok {
				t.Fatalf("command %d in rounds %d and %d", i, r, round)
			}
			seen[i] = round
		}
		if round == 0 && (idx[0] != 0 || !slices.Contains(idx, n-1)) {
			t.Fatalf("round 0 starts at %d and holds n-1: %v; want the oldest first and the newest in it", idx[0], slices.Contains(idx, n-1))
		}
	}
	if got := restartSample(3, 500, 0); len(got) != 3 {
		t.Fatalf("n below k: %v, want each of the 3 commands once", got)
	}
}
