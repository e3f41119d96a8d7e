package projection

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"

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
}

// NewAggregates returns the aggregates' index of the event log on disk,
// empty until Start.
func NewAggregates(disk bus.Disk, subj bus.Subjects, log *slog.Logger) *Aggregates {
	return &Aggregates{root: subj.Prefix + "." + bus.RootEvents + ".", model: newDiskModel(disk, "aggregate index", log)}
}

// Progress returns the sequence of the event log the index holds on
// disk, as it was left, before Start.
func (a *Aggregates) Progress() (uint64, error) { return a.model.load() }

// Start follows the event log from tail after what the disk holds, until
// ctx ends, and returns at once unless the disk's index cannot be read.
func (a *Aggregates) Start(ctx context.Context, tail bus.Tail) error {
	from, err := a.model.load()
	if err != nil {
		return err
	}
	go a.model.run(ctx)
	tail.Follow(ctx, ">", from+1, func(ev *bus.Event) { a.add(ctx, ev) })
	return nil
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
