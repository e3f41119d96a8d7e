package query

import (
	"strconv"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
)

// TestReadGate: reads take places in all and per caller, large reads also
// one of the large places and time from their caller's share; past any
// bound a read is refused with RATE_LIMITED and a Retry-After, the places
// come back when reads end and the share as time passes; an anonymous
// caller is not bounded.
func TestReadGate(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_000_000, 0)
	g := newReadGate(ReadLimits{Concurrent: 4, PerCaller: 2, Large: 2, LargePerCaller: 1, LargeShare: 250 * time.Millisecond})
	g.now = func() time.Time { return clock }

	refusedAfter := func(t *testing.T, err error, secs int) {
		t.Helper()
		e := errs.As(err)
		if err == nil || e.Code != errs.CodeRateLimited {
			t.Fatalf("got %v, want RATE_LIMITED", err)
		}
		if ra, ok := e.RetryAfter(); !ok || ra != strconv.Itoa(secs) {
			t.Fatalf("Retry-After %q (%v), want %d: %v", ra, ok, secs, err)
		}
	}
	mustEnter := func(t *testing.T, caller string) *readTurn {
		t.Helper()
		turn, err := g.enter(caller)
		if err != nil {
			t.Fatalf("%s: %v", caller, err)
		}
		return turn
	}

	t.Run("per caller, then in all", func(t *testing.T) {
		a1, a2 := mustEnter(t, "a"), mustEnter(t, "a")
		_, err := g.enter("a")
		refusedAfter(t, err, 1)
		b1, b2 := mustEnter(t, "b"), mustEnter(t, "b")
		_, err = g.enter("c") // four running: the total
		refusedAfter(t, err, 1)
		a1.end()
		mustEnter(t, "c").end()
		a2.end()
		b1.end()
		b2.end()
	})

	t.Run("anonymous callers are not bounded", func(t *testing.T) {
		for range 10 {
			turn, err := g.enter("")
			if err != nil || turn != nil {
				t.Fatalf("anonymous read: %v, %v", turn, err)
			}
			if err := turn.grow(); err != nil {
				t.Fatal(err)
			}
			turn.end()
		}
	})

	t.Run("large reads", func(t *testing.T) {
		a1, a2 := mustEnter(t, "a"), mustEnter(t, "a")
		if err := a1.grow(); err != nil {
			t.Fatal(err)
		}
		if err := a1.grow(); err != nil { // once is enough
			t.Fatal(err)
		}
		refusedAfter(t, a2.grow(), 1) // one large read per caller
		b1 := mustEnter(t, "b")
		if err := b1.grow(); err != nil {
			t.Fatal(err)
		}
		c1 := mustEnter(t, "c")
		refusedAfter(t, c1.grow(), 1) // two large reads in all
		a2.end()
		c1.end()
		a1.end()
		b1.end()
		if g.all.Open() != 0 || g.large.Open() != 0 {
			t.Fatalf("places still taken after every read ended: %d, %d large", g.all.Open(), g.large.Open())
		}
	})

	t.Run("a caller's share of large reads", func(t *testing.T) {
		// 250ms per second with a burst of 8 s: 2 s at once. One read of
		// 3 s leaves a debt of 1 s, made up in 4 s.
		turn := mustEnter(t, "d")
		if err := turn.grow(); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(3 * time.Second)
		turn.end()
		turn = mustEnter(t, "d")
		refusedAfter(t, turn.grow(), 4)
		other := mustEnter(t, "e")
		if err := other.grow(); err != nil { // others have their own
			t.Fatal(err)
		}
		other.end()
		clock = clock.Add(3 * time.Second)
		refusedAfter(t, turn.grow(), 1)
		clock = clock.Add(1100 * time.Millisecond)
		if err := turn.grow(); err != nil {
			t.Fatalf("after the debt is made up: %v", err)
		}
		turn.end()
		// Small reads do not count against the share.
		for range 5 {
			mustEnter(t, "d").end()
		}
	})
}
