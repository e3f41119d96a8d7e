package webhook

import (
	"sort"
	"sync"

	"github.com/agentbus/agentbus/pkg/bus"
)

// recent holds the latest events the dispatcher followed, in log order,
// for its workers to read instead of the log: one read of each event per
// replica, not one per subscription, and its id and type parsed once.
// It is bounded (recentMax events, recentBytes of payload: the oldest go
// first) and only ever answers with events: a worker that finds nothing
// there, or is behind what it holds, reads the log as before.
type recent struct {
	mu   sync.RWMutex
	buf  []*item // a ring: n items from head, oldest first
	head int
	n    int
	size int // payload bytes held
	// from is the sequence from which every followed event is held: the
	// Follow's start, then past the last one dropped.
	from uint64
}

const (
	recentMax   = 4096
	recentBytes = 8 << 20
)

func newRecent(from uint64) *recent {
	return &recent{buf: make([]*item, recentMax), from: from}
}

// add appends the next followed event (in log order, none skipped).
func (r *recent) add(it *item) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.n > 0 && (r.n == len(r.buf) || r.size+len(it.m.Data) > recentBytes) {
		old := r.buf[r.head]
		r.buf[r.head] = nil
		r.head = (r.head + 1) % len(r.buf)
		r.n--
		r.size -= len(old.m.Data)
		r.from = old.eventSeq + 1
	}
	r.buf[(r.head+r.n)%len(r.buf)] = it
	r.n++
	r.size += len(it.m.Data)
}

func (r *recent) at(i int) *item { return r.buf[(r.head+i)%len(r.buf)] }

// after returns the first events after seq whose subjects match one of
// filters, up to most and about maxBytes of payload — the same as reading
// the log from seq+1 would return, as far as the events followed go — or
// nil when it holds none after seq or does not hold every event after
// seq. skip, when past seq, is where a search with the same filters found
// nothing before: the events up to it are not looked at again. It also
// returns the last event it looked at (skip for the next search, when it
// found nothing), and whether it held every event after seq that the
// dispatcher followed (nothing found then means nothing followed yet).
func (r *recent) after(seq, skip uint64, filters []string, most, maxBytes int) ([]*item, uint64, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if seq+1 < r.from {
		return nil, 0, false // some events after seq are no longer held
	}
	from := max(seq, skip)
	i := sort.Search(r.n, func(i int) bool { return r.at(i).eventSeq > from })
	var out []*item
	size := 0
	for ; i < r.n && len(out) < most; i++ {
		it := r.at(i)
		from = it.eventSeq
		if !matchesAny(it.m.Subject, filters) {
			continue
		}
		if size += len(it.m.Data); size > maxBytes && len(out) > 0 {
			break
		}
		out = append(out, it)
	}
	return out, from, true
}

func matchesAny(subject string, filters []string) bool {
	for _, f := range filters {
		if bus.SubjectMatches(subject, f) {
			return true
		}
	}
	return false
}
