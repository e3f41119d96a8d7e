package projection

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentbus/agentbus/pkg/bus"
)

// TypeIndex finds a tenant's events, of given types or all: for each
// tenant and event type, the ascending sequences of its events on the
// event log, in memory (postings: a varint delta an event, and 8 bytes
// for each of a type's last sequences not yet in a full block), built by
// following the log from its start.
// The server can only find the events of a type by going through the
// events after the cursor (the type is the last subject token, which its
// subject index cannot look up, and it keeps no sequences per subject
// within a block), so a read of rare types cost a pass over the log; with
// the index a read costs what it returns. Safe for concurrent use.
type TypeIndex struct {
	events bus.Log
	subj   bus.Subjects
	mu     sync.RWMutex
	// seqs holds each tenant's sequences by event type.
	seqs map[string]map[string]*postings
	// through is the sequence up to which every event is indexed.
	through atomic.Uint64
}

// NewTypeIndex returns the type index of events, empty until Start.
func NewTypeIndex(events bus.Log, subj bus.Subjects) *TypeIndex {
	return &TypeIndex{events: events, subj: subj, seqs: map[string]map[string]*postings{}}
}

// Start follows the event log from its first event until ctx ends, and
// returns at once: the index holds more of the log as it goes (Through).
func (x *TypeIndex) Start(ctx context.Context) {
	x.StartOn(ctx, bus.LogTail(x.events, x.subj))
}

// StartOn is Start with the events from tail (the replica's follower of
// the log), which hands the index every event from the log's first.
func (x *TypeIndex) StartOn(ctx context.Context, tail bus.Tail) {
	// The whole stream (">"): the server counts what is pending after a
	// full wildcard without a pass over the messages, as it must for
	// "<prefix>.evt.>".
	tail.Follow(ctx, ">", 1, x.add)
}

// add indexes m, the log's next message.
func (x *TypeIndex) add(m *bus.Event) {
	if tenant, typ, ok := x.keyOf(m.Subject); ok {
		x.mu.Lock()
		byType := x.seqs[tenant]
		if byType == nil {
			byType = map[string]*postings{}
			x.seqs[tenant] = byType
		}
		p := byType[typ]
		if p == nil {
			p = &postings{}
			byType[typ] = p
		}
		p.add(m.Seq)
		x.mu.Unlock()
	}
	x.through.Store(m.Seq)
}

// keyOf returns the tenant and event type of an event's subject, as the
// read filters match them: typ is "" for a subject of the tenant's that
// no type filter matches.
func (x *TypeIndex) keyOf(subject string) (tenant, typ string, ok bool) {
	if tenant, typ, ok := x.subj.TypedEvent(bus.RootEvents, subject); ok {
		return tenant, typ, true
	}
	rest, found := strings.CutPrefix(subject, x.subj.Prefix+"."+bus.RootEvents+".")
	tenant, rest, _ = strings.Cut(rest, ".")
	return tenant, "", found && tenant != "" && rest != ""
}

// Through returns the sequence up to which the index holds every event.
func (x *TypeIndex) Through() uint64 { return x.through.Load() }

// Find returns the sequences of tenant's events of types (every type when
// none) after sequence after, ascending, at most limit of them, and
// through: every such event up to through is among them, or the result
// holds limit sequences.
func (x *TypeIndex) Find(tenant string, types []string, after uint64, limit int) (seqs []uint64, through uint64) {
	through = x.through.Load() // read first: what is appended later is left out
	x.mu.RLock()
	defer x.mu.RUnlock()
	byType := x.seqs[tenant]
	if len(types) == 0 {
		types = slices.Collect(maps.Keys(byType))
	}
	var lists []*postingsCursor
	for _, t := range slices.Compact(slices.Sorted(slices.Values(types))) {
		if p := byType[t]; p != nil {
			if c := p.from(after); c.ok() && c.peek() <= through {
				lists = append(lists, c)
			}
		}
	}
	for len(seqs) < limit && len(lists) > 0 {
		low := 0
		for i := range lists {
			if lists[i].peek() < lists[low].peek() {
				low = i
			}
		}
		seqs = append(seqs, lists[low].peek())
		if lists[low].next(); !lists[low].ok() || lists[low].peek() > through {
			lists = slices.Delete(lists, low, low+1)
		}
	}
	return seqs, through
}
