package projection

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/pkg/bus"
)

// Aggregates holds the sequence of each aggregate's last event on the
// event log, on the replica's disk (a key an aggregate), for the
// aggregates whose events share their shard's subjects (bus.Subjects):
// the server's subject index finds a shard's last event, this finds an
// aggregate's. It follows the log from what the disk holds, as the type
// index does. Safe for concurrent use.
type Aggregates struct {
	root  string // of the produced events' subjects (not injected ones)
	model *diskModel
	// shards holds the sequence of each shard's last event Last answers
	// for, by the shard's subjects without their last token (at most
	// maxShards; past that it starts again): how a writer learns that
	// another one appended to a shard without asking the server.
	shardsMu sync.Mutex
	shards   map[string]uint64
}

// maxShards bounds Aggregates.shards: 32 shards of each aggregate type of
// each tenant that had events since the start.
const maxShards = 1 << 16

// NewAggregates returns the aggregates' index of the event log on disk,
// empty until Start.
func NewAggregates(disk bus.Disk, subj bus.Subjects, log *slog.Logger) *Aggregates {
	return &Aggregates{root: subj.Prefix + "." + bus.RootEvents + ".", model: newDiskModel(disk, "aggregate index", log), shards: map[string]uint64{}}
}

// Progress returns the sequence of the event log the index holds on
// disk, as it was left, before Start.
func (a *Aggregates) Progress() (uint64, error) { return a.model.load() }

// Start follows the event log from tail after what the disk holds, until
// ctx ends, and returns at once unless the disk's index cannot be read.
func (a *Aggregates) Start(ctx context.Context, tail bus.Tail) error {
	return a.model.follow(ctx, tail, nil, func(ev *bus.Event) { a.add(ctx, ev) })
}

// add indexes ev, the log's next message: an event of an aggregate whose
// type is sharded (an event written before sharding, with the id in its
// subject, too).
func (a *Aggregates) add(ctx context.Context, ev *bus.Event) {
	if ev.AggID == "" || bus.IDInSubject(ev.AggType) || !strings.HasPrefix(ev.Subject, a.root) {
		a.model.advance(ev.Seq)
		return
	}
	a.model.put(ctx, ev.Seq, bus.DiskWrite{Key: lastSeqKey(ev.Tenant, ev.AggType, ev.AggID), Val: binary.BigEndian.AppendUint64(nil, ev.Seq)})
	// After the put: Last answers for the shard's events up to it.
	if shard, ok := shardOf(ev.Subject); ok {
		a.shardsMu.Lock()
		if _, ok := a.shards[shard]; !ok && len(a.shards) >= maxShards {
			clear(a.shards)
		}
		a.shards[shard] = ev.Seq
		a.shardsMu.Unlock()
	}
}

// shardOf returns an event subject of a sharded aggregate without its
// last token (the event type), or false when its aggregate token is not a
// shard's (bus.IsShard).
func shardOf(subject string) (string, bool) {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 {
		return "", false
	}
	j := strings.LastIndexByte(subject[:i], '.')
	if !bus.IsShard(subject[j+1 : i]) {
		return "", false
	}
	return subject[:i], true
}

// ShardLast returns the sequence of the last event of the shard whose
// subjects are filter (bus.Subjects.Aggregate) that the index applied,
// or 0 when it knows of none since the start: Last answers for every
// event of the shard up to it.
func (a *Aggregates) ShardLast(filter string) uint64 {
	a.shardsMu.Lock()
	defer a.shardsMu.Unlock()
	return a.shards[strings.TrimSuffix(filter, ".*")]
}

func lastSeqKey(tenant, aggType, aggID string) []byte {
	return diskKey(keyLastSeq, tenant, aggType, aggID)
}

// Last returns the sequence of the last event of an aggregate the index
// holds (Applied), 0 when it holds none.
func (a *Aggregates) Last(tenant, aggType, aggID string) (uint64, error) {
	raw, ok, err := a.model.get(lastSeqKey(tenant, aggType, aggID))
	switch {
	case err != nil:
		return 0, fmt.Errorf("the aggregate index: %w", err)
	case !ok:
		return 0, nil
	case len(raw) != 8:
		return 0, fmt.Errorf("the aggregate index holds %d bytes for %s %q, not 8", len(raw), aggType, aggID)
	}
	return binary.BigEndian.Uint64(raw), nil
}

// Applied returns the sequence of the event log up to which Last answers.
func (a *Aggregates) Applied() uint64 { return a.model.applied.Load() }

// Through returns the sequence up to which the disk holds the index.
func (a *Aggregates) Through() uint64 { return a.model.through.Load() }

// WaitApplied waits until Last answers for the event log up to seq, or
// ctx ends.
func (a *Aggregates) WaitApplied(ctx context.Context, seq uint64) error {
	return a.model.waitApplied(ctx, seq)
}

// WaitThrough waits until the disk holds the index up to seq, or ctx
// ends.
func (a *Aggregates) WaitThrough(ctx context.Context, seq uint64) error {
	return a.model.waitThrough(ctx, seq)
}
