package pushlog_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/pushlog"
)

func rec(transport, id string, at time.Time) pushlog.Record {
	return pushlog.Record{Transport: transport, EventID: id, EventType: "OrderPlaced", At: at, Listener: "key k1"}
}

// TestStoreBounds: past its bound of commands the store forgets the
// command pushed first, past its bound per command it counts what it
// leaves out, and a tenant sees none of another's.
func TestStoreBounds(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t.Run("the oldest commands are forgotten", func(t *testing.T) {
		t.Parallel()
		s := pushlog.NewStore(3, 8)
		for i := range 5 {
			s.Add("acme", fmt.Sprintf("c%d", i), rec(pushlog.SSE, "e", t0))
		}
		s.Add("acme", "c3", rec(pushlog.MCP, "e2", t0)) // not new: moves nothing
		if n := s.Len(); n != 3 {
			t.Fatalf("holds %d commands, want 3", n)
		}
		for i, want := range []int{0, 0, 1, 2, 1} {
			if got, _ := s.Of("acme", fmt.Sprintf("c%d", i)); len(got) != want {
				t.Errorf("c%d: %d pushes, want %d", i, len(got), want)
			}
		}
	})
	t.Run("a command keeps its bound and counts the rest", func(t *testing.T) {
		t.Parallel()
		s := pushlog.NewStore(10, 2)
		for i := range 5 {
			s.Add("acme", "c", rec(pushlog.A2A, fmt.Sprint(i), t0.Add(-time.Duration(i)*time.Second)))
		}
		got, omitted := s.Of("acme", "c")
		if len(got) != 2 || omitted != 3 {
			t.Fatalf("%d pushes, %d omitted; want 2 and 3", len(got), omitted)
		}
		if got[0].EventID != "1" || got[1].EventID != "0" {
			t.Errorf("not by time: %+v", got)
		}
	})
	t.Run("tenants apart", func(t *testing.T) {
		t.Parallel()
		s := pushlog.NewStore(10, 2)
		s.Add("acme", "c", rec(pushlog.SSE, "e", t0))
		if got, _ := s.Of("globex", "c"); got == nil || len(got) != 0 {
			t.Fatalf("another tenant's trace: %v, want [] (never nil)", got)
		}
	})
}

// TestStoreMemoryBounded: a store of 1,000 commands holds about as much
// after 100,000 commands as after 1,000.
func TestStoreMemoryBounded(t *testing.T) {
	s := pushlog.NewStore(1000, 4)
	t0 := time.Now()
	fill := func(from, to int) uint64 {
		for i := from; i < to; i++ {
			c := fmt.Sprintf("command-%d", i)
			for j := range 6 {
				s.Add("acme", c, rec(pushlog.SSE, fmt.Sprintf("%s-%d", c, j), t0))
			}
		}
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	first := fill(0, 1000)
	last := fill(1000, 100_000)
	if s.Len() != 1000 {
		t.Fatalf("holds %d commands, want 1000", s.Len())
	}
	if last > first+first/2 {
		t.Fatalf("heap %d bytes after 100,000 commands, %d after 1,000: not bounded", last, first)
	}
}
