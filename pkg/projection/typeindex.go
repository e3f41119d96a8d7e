package projection

import (
	"context"
	"encoding/binary"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
)

// TypeIndex finds a tenant's events, of given types or all: for each
// tenant and event type, the ascending sequences of its events on the
// event log, on the replica's disk (a key a sequence), with the sequence
// of the log it holds, from which it goes on following the log at the
// next start.
// The server can only find the events of a type by going through the
// events after the cursor (the type is the last subject token, which its
// subject index cannot look up, and it keeps no sequences per subject
// within a block), so a read of rare types cost a pass over the log; with
// the index a read costs what it returns. Safe for concurrent use.
type TypeIndex struct {
	subj  bus.Subjects
	model *diskModel
	mu    sync.RWMutex
	// types holds each tenant's event types (a key of keyTypeName each).
	types map[string]map[string]bool
}

// NewTypeIndex returns the type index of the event log on disk, empty
// until Start.
func NewTypeIndex(disk bus.Disk, subj bus.Subjects, log *slog.Logger) *TypeIndex {
	return &TypeIndex{subj: subj, model: newDiskModel(disk, "type index", log), types: map[string]map[string]bool{}}
}

// Progress returns the sequence of the event log the index holds on
// disk, as it was left, before Start.
func (x *TypeIndex) Progress() (uint64, error) { return x.model.load() }

// Start follows the event log from tail after what the disk holds, until
// ctx ends, and returns at once unless the disk's index cannot be read:
// the index holds more of the log as it goes (Through, WaitThrough).
func (x *TypeIndex) Start(ctx context.Context, tail bus.Tail) error {
	knownTypes := func() error {
		return x.model.disk.Scan([]byte{keyTypeName, 0}, []byte{keyTypeName, 1}, func(key, _ []byte) bool {
			tenant, typ, _ := strings.Cut(string(key[2:]), "\x00")
			x.known(tenant, typ)
			return true
		})
	}
	return x.model.follow(ctx, tail, knownTypes, func(ev *bus.Event) { x.add(ctx, ev) })
}

// known records that tenant has events of typ, and reports whether it
// was known before.
func (x *TypeIndex) known(tenant, typ string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	byType := x.types[tenant]
	if byType == nil {
		byType = map[string]bool{}
		x.types[tenant] = byType
	}
	was := byType[typ]
	byType[typ] = true
	return was
}

// add indexes ev, the log's next message.
func (x *TypeIndex) add(ctx context.Context, ev *bus.Event) {
	tenant, typ, ok := x.keyOf(ev.Subject)
	if !ok {
		x.model.advance(ev.Seq)
		return
	}
	writes := []bus.DiskWrite{{Key: typeSeqKey(tenant, typ, ev.Seq)}}
	if !x.known(tenant, typ) {
		writes = append(writes, bus.DiskWrite{Key: diskKey(keyTypeName, tenant, typ)})
	}
	x.model.put(ctx, ev.Seq, writes...)
}

// typeSeqKey is the key of an event of typ of tenant's at seq.
func typeSeqKey(tenant, typ string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append(diskKey(keyTypeSeq, tenant, typ), 0), seq)
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
	return tenant, "", found && envelope.ValidTenant(tenant) && rest != ""
}

// Through returns the sequence up to which the index holds every event.
func (x *TypeIndex) Through() uint64 { return x.model.through.Load() }

// WaitThrough waits until the index holds every event up to seq, or ctx
// ends.
func (x *TypeIndex) WaitThrough(ctx context.Context, seq uint64) error {
	return x.model.waitThrough(ctx, seq)
}

// Find returns the sequences of tenant's events of types (every type when
// none) after sequence after, ascending, at most limit of them, and
// through: every such event up to through is among them, or the result
// holds limit sequences. A disk that fails the read finds nothing, through
// 0: the caller reads the log instead.
func (x *TypeIndex) Find(tenant string, types []string, after uint64, limit int) (seqs []uint64, through uint64) {
	through = x.Through() // read first: what is appended later is left out
	if after >= through || limit <= 0 {
		return nil, through
	}
	if len(types) == 0 {
		x.mu.RLock()
		types = slices.Collect(maps.Keys(x.types[tenant]))
		x.mu.RUnlock()
	}
	for _, t := range slices.Compact(slices.Sorted(slices.Values(types))) {
		// Once limit sequences are found, the next type's scan stops below
		// the highest kept: what lies above cannot enter the page.
		end := through + 1
		if len(seqs) == limit {
			end = seqs[limit-1]
		}
		if end <= after+1 {
			continue
		}
		n := 0
		err := x.model.disk.Scan(typeSeqKey(tenant, t, after+1), typeSeqKey(tenant, t, end), func(key, _ []byte) bool {
			seqs = append(seqs, binary.BigEndian.Uint64(key[len(key)-8:]))
			n++
			return n < limit
		})
		if err != nil {
			return nil, 0
		}
		slices.Sort(seqs)
		seqs = seqs[:min(len(seqs), limit)]
	}
	return seqs[:min(len(seqs), limit)], through
}
