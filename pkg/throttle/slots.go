package throttle

import "sync"

// Slots counts what callers hold open — live streams, MCP sessions, reads
// of the event log running — in all and per caller, within a bound on
// each. A caller is named by an id; "" (an anonymous caller) is held to
// the bound in all only. Safe for concurrent use.
type Slots struct {
	total, perCaller int

	mu       sync.Mutex
	open     int
	byCaller map[string]int
}

// NewSlots returns slots bounded to total in all and perCaller per caller.
func NewSlots(total, perCaller int) *Slots {
	return &Slots{total: total, perCaller: perCaller, byCaller: map[string]int{}}
}

// Take takes a slot for caller and reports whether there was one; when
// there was not, callerFull says whether the caller's own bound was the
// one reached. A slot taken is given back with Give.
func (s *Slots) Take(caller string) (ok, callerFull bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if caller != "" && s.byCaller[caller] >= s.perCaller {
		return false, true
	}
	if s.open >= s.total {
		return false, false
	}
	s.open++
	s.byCaller[caller]++
	return true, false
}

// Give gives back a slot caller took.
func (s *Slots) Give(caller string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if s.byCaller[caller]--; s.byCaller[caller] <= 0 {
		delete(s.byCaller, caller)
	}
}

// Open returns how many slots are taken, in all.
func (s *Slots) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Held returns how many slots caller holds.
func (s *Slots) Held(caller string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byCaller[caller]
}

// PerCaller returns the bound per caller.
func (s *Slots) PerCaller() int { return s.perCaller }
