package execute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// AggregateIndex finds the last event of an aggregate whose type is
// sharded (bus.Subjects): projection.Aggregates on the replica's disk.
type AggregateIndex interface {
	// Last returns the sequence of the aggregate's last event among those
	// up to Applied, 0 when it has none.
	Last(tenant, aggType, aggID string) (uint64, error)
	// Applied returns the event-log sequence up to which Last answers.
	Applied() uint64
	// WaitApplied waits until Last answers up to seq, or ctx ends.
	WaitApplied(ctx context.Context, seq uint64) error
	// ShardLast returns the sequence of the last event of the shard
	// whose subjects are filter that Last answers for (every event of
	// the shard up to it), 0 when it knows of none.
	ShardLast(filter string) uint64
}

// The events of a sharded aggregate share their subjects with the other
// aggregates of its shard, so an append's optimistic expectation is on
// the shard: the shard's last event must still be the one the decision
// knew of. The aggregate's own last event comes from the aggregate index,
// once it holds the log up to the shard's last event; this process's own
// appends are known at once, so a process that alone writes a shard reads
// nothing from the server before appending to it, and another writer's
// appends are known once the index holds them (ShardLast), so replicas
// writing the same shards conflict only when their appends cross.

// shardCache is what this process knows of the shards it appends to.
// Safe for concurrent use.
type shardCache struct {
	mu sync.Mutex
	// last holds a shard's last sequence (by its filter) while every
	// event of the shard up to it is in the index or in mine.
	last map[string]uint64
	// mine holds the last event this process appended to an aggregate,
	// until the index holds it.
	mine map[string]*bus.Message
}

// maxMine bounds shardCache.mine: past it, what the index does not hold
// yet is forgotten with the shards it names, which are read again. An
// event's payload is kept up to maxMineData; a larger one is read from
// the log when a decider asks for it.
const (
	maxMine     = 4096
	maxMineData = 4096
)

func newShardCache() shardCache {
	return shardCache{last: map[string]uint64{}, mine: map[string]*bus.Message{}}
}

// aggregateHead is what the processor knows of an aggregate before it
// appends to it.
type aggregateHead struct {
	seq       uint64       // of its last event; 0 for none
	msg       *bus.Message // that event, when this process appended it
	filter    string       // its shard's subjects
	shardLast uint64       // the shard's last sequence
}

func aggregateKey(tenant, aggType, aggID string) string {
	return tenant + "\x00" + aggType + "\x00" + aggID
}

// sharded reports whether the events of aggType's aggregates are on
// their shard's subjects.
func sharded(aggType string) bool { return aggType != "" && !bus.IDInSubject(aggType) }

// shardWait bounds how long a decision waits for the aggregate index to
// hold a shard's last event: past it the delivery fails and is retried.
const shardWait = 10 * time.Second

// head returns what is known of an aggregate of a sharded type: its
// shard's last sequence (known here, or read from the server and waited
// for in the index) and its last event's.
func (r *Processor) head(ctx context.Context, tenant, aggType, aggID string) (aggregateHead, error) {
	idx := r.p.Aggregates
	h := aggregateHead{filter: r.subj.Aggregate(tenant, aggType, aggID)}
	if idx == nil {
		return h, errors.New("no aggregate index: the processor cannot read the aggregates of sharded types")
	}
	// The shard's last sequence and this process's last event of the
	// aggregate are read together: while the first is known, each event
	// of the shard up to it is in the index or among this process's.
	c := &r.shards
	il := idx.ShardLast(h.filter) // before the lock: an earlier answer is only lower
	c.mu.Lock()
	last, known := c.last[h.filter]
	if known && il > last {
		// Another writer appended to the shard since, and the index
		// holds its events: an append expecting last would be refused.
		last = il
		c.last[h.filter] = il
	}
	mine := c.mine[aggregateKey(tenant, aggType, aggID)]
	c.mu.Unlock()
	if !known {
		m, err := r.p.Events.Last(ctx, h.filter)
		switch {
		case errors.Is(err, errs.ErrNotFound):
		case err != nil:
			return h, err
		default:
			last = m.Seq
		}
		wctx, cancel := context.WithTimeout(ctx, shardWait)
		err = idx.WaitApplied(wctx, last)
		cancel()
		if err != nil {
			return h, fmt.Errorf("the aggregate index: %w (%w)", errs.ErrUnavailable, err)
		}
		c.mu.Lock()
		if _, ok := c.last[h.filter]; !ok {
			c.last[h.filter] = last
		}
		c.mu.Unlock()
	}
	h.shardLast = last
	seq, err := idx.Last(tenant, aggType, aggID)
	if err != nil {
		return h, err
	}
	h.seq = seq
	if mine != nil && mine.Seq > seq {
		h.seq, h.msg = mine.Seq, mine
	}
	return h, nil
}

// lastOfSharded is LastEvent for a sharded aggregate type.
func (r *Processor) lastOfSharded(ctx context.Context, tenant, aggType, aggID string) (*bus.Message, error) {
	h, err := r.head(ctx, tenant, aggType, aggID)
	switch {
	case err != nil:
		return nil, err
	case h.seq == 0:
		return nil, fmt.Errorf("%s %q: %w", aggType, aggID, errs.ErrNotFound)
	case h.msg != nil && h.msg.Data != nil:
		m := *h.msg // the caller's own copy
		m.Header = maps.Clone(h.msg.Header)
		return &m, nil
	}
	return r.p.Events.Get(ctx, h.seq)
}

// shardExpect turns a decision's expectation on a sharded aggregate into
// one on its shard: errs.ErrConflict when the aggregate's last event is
// no longer the one expected.
func (r *Processor) shardExpect(ctx context.Context, tenant string, ev decide.NewEvent, want uint64) (*bus.Expect, error) {
	h, err := r.head(ctx, tenant, ev.AggType, ev.AggID)
	if err != nil {
		return nil, err
	}
	if h.seq != want {
		return nil, fmt.Errorf("%s %q is at %d, not %d: %w", ev.AggType, ev.AggID, h.seq, want, errs.ErrConflict)
	}
	return &bus.Expect{Subject: h.filter, LastSeq: h.shardLast}, nil
}

// appended records msgs, the events of tenant's evs, stored with last as
// the sequence of the last of them, under expect (nil: none).
func (r *Processor) appended(tenant string, evs []decide.NewEvent, msgs []*bus.Message, last uint64, expect *bus.Expect) {
	c := &r.shards
	c.mu.Lock()
	defer c.mu.Unlock()
	var lastOnShard uint64 // of the expected shard
	at := time.Now()
	for i, ev := range evs {
		if !sharded(ev.AggType) {
			continue
		}
		filter := r.subj.Aggregate(tenant, ev.AggType, ev.AggID)
		if expect == nil || filter != expect.Subject {
			delete(c.last, filter) // another writer may have come between
			continue
		}
		// An atomic batch's messages are stored one after another.
		m := *msgs[i]
		m.Seq, m.Time = last-uint64(len(msgs)-1-i), at
		if len(m.Data) > maxMineData {
			m.Data = nil // read again from the log when asked for
		}
		key := aggregateKey(tenant, ev.AggType, ev.AggID)
		if old, ok := c.mine[key]; !ok || old.Seq < m.Seq {
			c.mine[key] = &m
		}
		lastOnShard = m.Seq
	}
	if lastOnShard > 0 && c.last[expect.Subject] == expect.LastSeq {
		// Nothing came between the expected event and these.
		c.last[expect.Subject] = lastOnShard
	}
	if len(c.mine) > maxMine {
		r.pruneMineLocked()
	}
}

// pruneMineLocked forgets what the index holds already, and when that is
// not enough, everything with the shards' last sequences.
func (r *Processor) pruneMineLocked() {
	c := &r.shards
	applied := r.p.Aggregates.Applied()
	for k, m := range c.mine {
		if m.Seq <= applied {
			delete(c.mine, k)
		}
	}
	if len(c.mine) > maxMine/2 {
		clear(c.mine)
		clear(c.last)
	}
}

// conflicted forgets a shard's last sequence after an append expecting
// it was refused: another writer appended to the shard.
func (r *Processor) conflicted(expect *bus.Expect) {
	c := &r.shards
	c.mu.Lock()
	if c.last[expect.Subject] == expect.LastSeq {
		delete(c.last, expect.Subject)
	}
	c.mu.Unlock()
}

// OrderKey is the ordering key of a delivery of the processor's consumer
// (natsjs.ConsumeOptions.KeyOf): for a command a catalogue rule places on
// a sharded aggregate, its aggregate's shard, so that this process
// appends to a shard from one worker at a time and its appends never
// conflict with each other; for any other, its correlation key. A command whose
// aggregate id cannot be read gets its correlation key: deciding rejects
// it.
func (r *Processor) OrderKey(m *bus.Message) string {
	tenant, typ, ok := r.subj.ParseCommand(m.Subject)
	if !ok {
		return decide.CorrelationKey(m)
	}
	rule, ok := r.ruleAggregates[typ]
	if !ok {
		return decide.CorrelationKey(m)
	}
	_, _, env, err := envelope.SplitObject(m.Data)
	if err != nil {
		return decide.CorrelationKey(m)
	}
	_, _, data, err := envelope.SplitObject(env["data"])
	if err != nil {
		return decide.CorrelationKey(m)
	}
	var id string
	if json.Unmarshal(data[rule.IDField], &id) != nil || !envelope.ValidTokenID(id) {
		return decide.CorrelationKey(m)
	}
	return r.subj.Aggregate(tenant, rule.Type, id)
}

// ruleAggregatesOf maps each command type of cat whose rule places its
// event on a sharded aggregate to that aggregate's rule (the latest
// version's, when versions differ: the key orders, it decides nothing).
func ruleAggregatesOf(cat *catalog.Catalog) map[string]catalog.AggregateRule {
	out := map[string]catalog.AggregateRule{}
	for _, e := range cat.Commands() {
		if e.Rule != nil && e.Rule.Aggregate != nil && sharded(e.Rule.Aggregate.Type) {
			out[e.Type] = *e.Rule.Aggregate
		}
	}
	return out
}
