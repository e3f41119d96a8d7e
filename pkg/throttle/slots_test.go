package throttle_test

import (
	"testing"

	"github.com/agentbus/agentbus/pkg/throttle"
)

// TestSlots: a caller is held to its own bound, every caller to the bound
// in all (the anonymous caller to that one only), and a slot given back
// can be taken again.
func TestSlots(t *testing.T) {
	t.Parallel()
	s := throttle.NewSlots(3, 2)
	take := func(caller string, wantOK, wantCallerFull bool) {
		t.Helper()
		if ok, full := s.Take(caller); ok != wantOK || full != wantCallerFull {
			t.Fatalf("Take(%q) = %v, %v; want %v, %v", caller, ok, full, wantOK, wantCallerFull)
		}
	}
	take("a", true, false)
	take("a", true, false)
	take("a", false, true) // a's own bound
	take("b", true, false)
	take("b", false, false) // the bound in all
	take("", false, false)
	if n := s.Open(); n != 3 {
		t.Fatalf("Open = %d, want 3", n)
	}
	s.Give("a")
	take("", true, false)
	take("", false, false)
	s.Give("")
	s.Give("b")
	take("", true, false)
	take("", true, false) // anonymous: no bound of its own
	if n := s.Open(); n != 3 {
		t.Fatalf("Open = %d, want 3", n)
	}
}
