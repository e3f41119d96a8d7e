package projection

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
)

// Registry is one read model (agents, services or subscriptions): per tenant, the live
// records by id, projected from the aggregate's events. It keeps a copy on
// the replica's disk (registryDisk), from which it starts, replaying the
// event log after what the copy holds, and it is kept current by following
// the log. Safe for concurrent use.
type Registry[T any] struct {
	aggType string
	filter  string // every event of aggType, all tenants
	subj    bus.Subjects
	fold    decide.Fold[T]
	log     *slog.Logger
	disk    *registryDisk

	mu      sync.RWMutex
	src     bus.Log // the event log, once started
	tenants map[string]*records[T]
	applied uint64        // last stream sequence applied
	changed chan struct{} // closed and replaced whenever applied moves
}

type records[T any] struct {
	byID map[string]*T
	ids  []string // sorted
	// seq is, by id, the sequence of the last event of the record's
	// aggregate applied (folded or not): what the log's last event on the
	// aggregate's subjects is, once the registry has caught up.
	seq map[string]uint64
}

func newRecords[T any]() *records[T] {
	return &records[T]{byID: map[string]*T{}, seq: map[string]uint64{}}
}

func newRegistry[T any](disk bus.Disk, subj bus.Subjects, log *slog.Logger, aggType string, f decide.Fold[T]) *Registry[T] {
	return &Registry[T]{aggType: aggType, filter: subj.Event(bus.RootEvents, "*", aggType, "*", "*"),
		subj: subj, fold: f, log: log, disk: newRegistryDisk(disk, aggType, log),
		tenants: map[string]*records[T]{}, changed: make(chan struct{})}
}

// replayBatch is how many events one read of the log returns.
const replayBatch = 500

// start loads the registry from the disk, replays the log after what the
// disk held, then follows tail from there; until ctx ends, it writes what
// changes to the disk. It fails when the disk or the log cannot be read.
func (r *Registry[T]) start(ctx context.Context, log bus.Log, tail bus.Tail) error {
	r.mu.Lock()
	err := r.loadLocked()
	if err == nil {
		r.src = log
		go r.disk.run(ctx)
		err = r.catchUpLocked(ctx, log, 0)
	}
	from := r.applied + 1
	r.mu.Unlock()
	if err != nil {
		return err
	}
	tail.Follow(ctx, r.filter, from, r.apply)
	return nil
}

// loadLocked fills the empty registry with the records on disk, at the
// log position they hold it at; with none (or none it can decode) it
// stays empty, at the log's start.
func (r *Registry[T]) loadLocked() error {
	tenants := map[string]*records[T]{}
	through, ok, err := r.disk.load(func(tenant, id string, seq uint64, raw []byte) error {
		rec := new(T)
		if err := json.Unmarshal(raw, rec); err != nil {
			return fmt.Errorf("%s %s of tenant %s: %w", r.aggType, id, tenant, err)
		}
		recs := tenants[tenant]
		if recs == nil {
			recs = newRecords[T]()
			tenants[tenant] = recs
		}
		recs.ids = append(recs.ids, id) // load hands each tenant's ids in order
		recs.byID[id], recs.seq[id] = rec, seq
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s registry: %w", r.aggType, err)
	}
	if ok {
		r.tenants, r.applied = tenants, through
	}
	return nil
}

// rebuild drops every record, on disk too, and replays the log from the
// start. Readers wait meanwhile; the live feed goes on afterwards without
// a gap.
func (r *Registry[T]) rebuild(ctx context.Context, log bus.Log) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	target := r.applied
	var removals []bus.DiskWrite
	for tenant, recs := range r.tenants {
		for _, id := range recs.ids {
			removals = append(removals, r.disk.removal(tenant, id))
		}
	}
	r.disk.put(0, removals...)
	r.tenants, r.applied = map[string]*records[T]{}, 0
	return r.catchUpLocked(ctx, log, target)
}

// catchUpLocked applies the log until nothing more is stored and at least
// target was applied (a lagging replica may answer reads with less).
func (r *Registry[T]) catchUpLocked(ctx context.Context, log bus.Log, target uint64) error {
	for {
		msgs, err := log.Range(ctx, r.filter, r.applied+1, replayBatch)
		if err != nil {
			return fmt.Errorf("%s registry: replay from %d: %w", r.aggType, r.applied+1, err)
		}
		for _, m := range msgs {
			r.applyLocked(bus.NewEvent(r.subj, m))
		}
		if len(msgs) > 0 {
			continue
		}
		if r.applied >= target {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s registry: replay reached %d of %d: %w", r.aggType, r.applied, target, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *Registry[T]) apply(ev *bus.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applyLocked(ev)
}

// Project applies one event of the registry's aggregate. Idempotent: an
// event at or below the last one applied changes nothing.
func (r *Registry[T]) Project(_ context.Context, m *bus.Message) error {
	r.apply(bus.NewEvent(r.subj, m))
	return nil
}

// applyLocked applies one event, and queues its change and the position
// it brings the registry to for the disk.
func (r *Registry[T]) applyLocked(ev *bus.Event) {
	m := ev.Message
	if m.Seq <= r.applied {
		return // replayed before the feed started, or delivered twice
	}
	r.applied = m.Seq
	close(r.changed)
	r.changed = make(chan struct{})
	r.disk.put(m.Seq, r.foldLocked(ev)...)
}

// foldLocked folds one event into its record and returns the change to
// write to the disk (none when no record changed). Events agentbus would
// not write (any NATS publisher can append to the log) are skipped with a
// warning: a subject whose tenant or id is not valid, an envelope that
// does not decode, or one the fold refuses.
func (r *Registry[T]) foldLocked(ev *bus.Event) []bus.DiskWrite {
	m := ev.Message
	tenant, id, typ := ev.Tenant, ev.AggID, ev.Type
	if !ev.Parsed || ev.AggType != r.aggType { // the filter delivers only this aggregate's subjects
		r.skip(m, "the subject's tenant or id is not valid")
		return nil
	}
	recs := r.tenants[tenant]
	var cur *T
	if recs != nil {
		cur = recs.byID[id]
	}
	next := cur
	if data, err := decide.EventData(m); err != nil {
		r.skip(m, "the envelope does not decode")
	} else if folded, ok := r.fold(cur, id, typ, data); !ok {
		r.skip(m, "data does not decode, data.id is not the subject's id, or a registration lists something that is not a message type")
	} else {
		next = folded
	}
	if next == cur {
		if cur == nil {
			return nil
		}
		recs.seq[id] = m.Seq
		return []bus.DiskWrite{r.disk.record(tenant, id, m.Seq, cur)}
	}
	if recs == nil {
		recs = newRecords[T]()
		r.tenants[tenant] = recs
	}
	if next == nil {
		delete(recs.byID, id)
		delete(recs.seq, id)
		if i, found := slices.BinarySearch(recs.ids, id); found {
			recs.ids = slices.Delete(recs.ids, i, i+1)
		}
		return []bus.DiskWrite{r.disk.removal(tenant, id)}
	}
	if cur == nil {
		i, _ := slices.BinarySearch(recs.ids, id)
		recs.ids = slices.Insert(recs.ids, i, id)
	}
	recs.byID[id] = next
	recs.seq[id] = m.Seq
	return []bus.DiskWrite{r.disk.record(tenant, id, m.Seq, next)}
}

func (r *Registry[T]) skip(m *bus.Message, why string) {
	r.log.Warn(r.aggType+" registry: event skipped", "subject", m.Subject, "seq", m.Seq, "reason", why)
}

// WaitApplied returns once the registry has applied the log up to seq, or
// with ctx's error.
func (r *Registry[T]) WaitApplied(ctx context.Context, seq uint64) error {
	for {
		r.mu.RLock()
		done, ch := r.applied >= seq, r.changed
		r.mu.RUnlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Current returns once the registry has applied every event of its
// aggregate stored at or below seq — a position in the whole event log,
// which may be another aggregate's event — reading from the log what the
// live feed has not delivered yet. It fails when the registry has not
// started or the log cannot be read.
func (r *Registry[T]) Current(ctx context.Context, seq uint64) error {
	// Mostly the live feed has applied seq already: readers go on without
	// waiting for the write lock.
	r.mu.RLock()
	done := r.src != nil && r.applied >= seq
	r.mu.RUnlock()
	if done {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.src == nil {
		return fmt.Errorf("%s registry: not started", r.aggType)
	}
	for r.applied < seq {
		msgs, err := r.src.Range(ctx, r.filter, r.applied+1, replayBatch)
		if err != nil {
			return fmt.Errorf("%s registry: read from %d: %w", r.aggType, r.applied+1, err)
		}
		if len(msgs) == 0 {
			return nil // nothing more of it is stored, up to seq or beyond
		}
		for _, m := range msgs {
			r.applyLocked(bus.NewEvent(r.subj, m))
		}
	}
	return nil
}

// Get returns the record of id of tenant.
func (r *Registry[T]) Get(tenant, id string) (T, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var zero T
	recs := r.tenants[tenant]
	if recs == nil {
		return zero, false
	}
	p := recs.byID[id]
	if p == nil {
		return zero, false
	}
	return *p, true
}

// List returns up to limit records of tenant with ids after after, in id
// order, and the cursor of the next page ("" when this is the last one).
func (r *Registry[T]) List(tenant, after string, limit int) ([]T, string) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := []T{}
	recs := r.tenants[tenant]
	if recs == nil {
		return out, ""
	}
	i, found := slices.BinarySearch(recs.ids, after)
	if found {
		i++
	}
	end := min(i+limit, len(recs.ids))
	for _, id := range recs.ids[i:end] {
		out = append(out, *recs.byID[id])
	}
	if end < len(recs.ids) && len(out) > 0 {
		return out, recs.ids[end-1]
	}
	return out, ""
}

// All calls fn for every record of every tenant, in no particular order,
// with the sequence of the last event of its aggregate the registry
// applied, holding the registry's read lock: fn must not call the
// registry.
func (r *Registry[T]) All(fn func(tenant string, rec T, seq uint64)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for tenant, recs := range r.tenants {
		for id, rec := range recs.byID {
			fn(tenant, *rec, recs.seq[id])
		}
	}
}

// Tenants returns the tenants that have records, sorted.
func (r *Registry[T]) Tenants() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.tenants))
	for t, recs := range r.tenants {
		if len(recs.ids) > 0 {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// Count returns how many records tenant has, or all tenants together
// when tenant is "".
func (r *Registry[T]) Count(tenant string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if tenant != "" {
		if recs := r.tenants[tenant]; recs != nil {
			return len(recs.ids)
		}
		return 0
	}
	n := 0
	for _, recs := range r.tenants {
		n += len(recs.ids)
	}
	return n
}

// Each calls fn for every record of tenant, in id order, until fn returns
// false. fn must not call the registry.
func (r *Registry[T]) Each(tenant string, fn func(T) bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if recs := r.tenants[tenant]; recs != nil {
		for _, id := range recs.ids {
			if !fn(*recs.byID[id]) {
				return
			}
		}
	}
}

// Registries are the agents, services and subscriptions read models.
type Registries struct {
	Agents        *Registry[decide.Agent]
	Services      *Registry[decide.Service]
	Subscriptions *Registry[decide.Subscription]
	log           bus.Log
	subj          bus.Subjects
}

// NewRegistries returns empty registries of the event log, each keeping
// its copy on disk (the replica's); Start fills them.
func NewRegistries(events bus.Log, disk bus.Disk, subj bus.Subjects, log *slog.Logger) *Registries {
	return &Registries{
		Agents:        newRegistry(disk, subj, log, decide.AggAgent, decide.FoldAgent),
		Services:      newRegistry(disk, subj, log, decide.AggService, decide.FoldService),
		Subscriptions: newRegistry(disk, subj, log, decide.AggSubscription, decide.FoldSubscription),
		log:           events,
		subj:          subj,
	}
}

// Progress returns the highest sequence of the event log a registry holds
// on disk, as the disk was left, before Start.
func (r *Registries) Progress() (uint64, error) {
	var held uint64
	for _, d := range []*registryDisk{r.Agents.disk, r.Services.disk, r.Subscriptions.disk} {
		seq, err := d.held()
		if err != nil {
			return 0, err
		}
		held = max(held, seq)
	}
	return held, nil
}

// Start loads the registries from the disk, replays the event log after
// what each held (all of it for one the disk holds nothing of), and keeps
// them current, on disk too, until ctx ends. It returns once each has
// replayed everything stored, so a replica answers reads only with
// complete registries.
func (r *Registries) Start(ctx context.Context) error {
	return r.StartOn(ctx, bus.LogTail(r.log, r.subj))
}

// StartOn is Start with the events after the replay from tail (the
// replica's follower of the log).
func (r *Registries) StartOn(ctx context.Context, tail bus.Tail) error {
	if err := r.Agents.start(ctx, r.log, tail); err != nil {
		return err
	}
	if err := r.Services.start(ctx, r.log, tail); err != nil {
		return err
	}
	return r.Subscriptions.start(ctx, r.log, tail)
}

// Count returns how many agents (aggType decide.AggAgent) or services
// tenant has registered, or all tenants together when tenant is "" (as
// decide.Quotas counts).
func (r *Registries) Count(tenant, aggType string) int {
	if aggType == decide.AggAgent {
		return r.Agents.Count(tenant)
	}
	return r.Services.Count(tenant)
}

// Rebuild drops the registries, on disk too, and replays them from the
// event log, as a start with an empty disk does. Reads wait while it runs.
func (r *Registries) Rebuild(ctx context.Context) error {
	if err := r.Agents.rebuild(ctx, r.log); err != nil {
		return err
	}
	if err := r.Services.rebuild(ctx, r.log); err != nil {
		return err
	}
	return r.Subscriptions.rebuild(ctx, r.log)
}
