package pushlog

import (
	"slices"
	"sync"
)

// Store holds the pushes of the last commands it was told of, bounded: at
// most Commands commands (past them the command whose first push came
// first is forgotten, whatever came since) and PerCommand records each
// (past them a command's further pushes are only counted). What it holds
// is so bounded whatever the traffic. Safe for concurrent use.
type Store struct {
	per int

	mu    sync.Mutex
	byKey map[key]*entry
	// ring holds the commands in the order of their first push; head is
	// where the next goes, over the oldest once it is full.
	ring []key
	head int
}

type key struct{ tenant, corr string }

type entry struct {
	recs    []Record
	omitted int
}

// The bounds of a store, unless told otherwise.
const (
	DefaultCommands   = 10_000
	DefaultPerCommand = 32
)

// NewStore returns a store of at most commands commands and perCommand
// records each (not positive: DefaultCommands, DefaultPerCommand).
func NewStore(commands, perCommand int) *Store {
	if commands <= 0 {
		commands = DefaultCommands
	}
	if perCommand <= 0 {
		perCommand = DefaultPerCommand
	}
	return &Store{per: perCommand, byKey: make(map[key]*entry, commands), ring: make([]key, 0, commands)}
}

// Add records a push of tenant's command corr.
func (s *Store) Add(tenant, corr string, r Record) { s.add(tenant, corr, r) }

// add is Add reporting whether it kept the record (false: the command has
// its PerCommand records, and this one is only counted).
func (s *Store) add(tenant, corr string, r Record) (kept bool) {
	k := key{tenant, corr}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byKey[k]
	if e == nil {
		e = &entry{}
		if len(s.ring) < cap(s.ring) {
			s.ring = append(s.ring, k)
		} else {
			delete(s.byKey, s.ring[s.head])
			s.ring[s.head] = k
			s.head = (s.head + 1) % len(s.ring)
		}
		s.byKey[k] = e
	}
	if len(e.recs) >= s.per {
		e.omitted++
		return false
	}
	e.recs = append(e.recs, r)
	return true
}

// Of returns the pushes of tenant's command corr it holds, by time (a
// new slice, never nil), and how many more it counted without keeping.
func (s *Store) Of(tenant, corr string) ([]Record, int) {
	s.mu.Lock()
	e := s.byKey[key{tenant, corr}]
	var recs []Record
	omitted := 0
	if e != nil {
		recs, omitted = slices.Clone(e.recs), e.omitted
	}
	s.mu.Unlock()
	if recs == nil {
		return []Record{}, 0
	}
	slices.SortStableFunc(recs, func(a, b Record) int { return a.At.Compare(b.At) })
	return recs, omitted
}

// Len returns how many commands it holds pushes of.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey)
}
