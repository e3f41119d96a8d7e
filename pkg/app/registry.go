package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
)

// Agent is the agents registry's record of an agent.
type Agent struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Accepts     []string `json:"accepts"`
	Produces    []string `json:"produces"`
	Status      string   `json:"status"` // active | paused
	CreatedAt   string   `json:"createdAt"`
	UpdatedAt   string   `json:"updatedAt"`
}

// Service is the services registry's record of a service.
type Service struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Accepts     []string `json:"accepts"`
	Produces    []string `json:"produces"`
	CreatedAt   string   `json:"createdAt"`
}

// fold applies one event of aggregate id to its record: it returns the
// new record, nil when the aggregate is gone, or cur for an event it
// ignores; false when the event would act on the record but its data
// does not decode or its data.id is not id (records are stored under the subject's id and carry data.id;
// any NATS publisher can append to the log). Records are never changed in
// place, so readers may keep them.
type fold[T any] func(cur *T, id, typ string, data json.RawMessage) (*T, bool)

func foldAgent(cur *Agent, id, typ string, data json.RawMessage) (*Agent, bool) {
	switch typ {
	case TypeAgentRegistered:
		r, ok := registrationOf(id, data)
		if !ok {
			return cur, false
		}
		return &Agent{ID: r.ID, Name: r.Name, Description: r.Description, Accepts: nonNil(r.Accepts),
			Produces: nonNil(r.Produces), Status: AgentActive, CreatedAt: r.CreatedAt, UpdatedAt: r.CreatedAt}, true
	case TypeAgentPaused, TypeAgentResumed:
		if cur == nil {
			return nil, true
		}
		c, ok := changeOf(id, data)
		if !ok {
			return cur, false
		}
		next := *cur
		next.Status, next.UpdatedAt = AgentActive, c.At
		if typ == TypeAgentPaused {
			next.Status = AgentPaused
		}
		return &next, true
	case TypeAgentDeleted:
		return deleted(cur, id, data)
	}
	return cur, true
}

func foldService(cur *Service, id, typ string, data json.RawMessage) (*Service, bool) {
	switch typ {
	case TypeServiceRegistered:
		r, ok := registrationOf(id, data)
		if !ok {
			return cur, false
		}
		return &Service{ID: r.ID, Name: r.Name, Description: r.Description, Accepts: nonNil(r.Accepts),
			Produces: nonNil(r.Produces), CreatedAt: r.CreatedAt}, true
	case TypeServiceDeleted:
		return deleted(cur, id, data)
	}
	return cur, true
}

// deleted folds a delete event of aggregate id: the record goes.
func deleted[T any](cur *T, id string, data json.RawMessage) (*T, bool) {
	if cur == nil {
		return nil, true
	}
	if _, ok := changeOf(id, data); !ok {
		return cur, false
	}
	return nil, true
}

// registrationOf and changeOf read the data of a registration, or of a
// pause, resume or delete event, of aggregate id; false when it does not
// decode, names another id or, for a registration, lists a type that is
// not a message type.
func registrationOf(id string, data json.RawMessage) (registration, bool) {
	var r registration
	if err := json.Unmarshal(data, &r); err != nil || r.ID != id {
		return r, false
	}
	// Types become consumer filters (control.go): only what the
	// registration schemas allow, never a wildcard.
	for _, t := range slices.Concat(r.Accepts, r.Produces) {
		if !envelope.ValidType(t) {
			return r, false
		}
	}
	return r, true
}

func changeOf(id string, data json.RawMessage) (change, bool) {
	var c change
	err := json.Unmarshal(data, &c)
	return c, err == nil && c.ID == id
}

// eventData returns the data member of a stored event's envelope.
func eventData(m *bus.Message) (json.RawMessage, error) {
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	err := json.Unmarshal(m.Data, &env)
	return env.Data, err
}

// registry is one read model (agents or services): per tenant, the live
// records by id, projected from the aggregate's events. It is rebuilt from
// the event log at every start and kept current by following the log.
// Safe for concurrent use.
type registry[T any] struct {
	aggType string
	filter  string // every event of aggType, all tenants
	subj    Subjects
	fold    fold[T]
	log     *slog.Logger

	mu      sync.RWMutex
	tenants map[string]*records[T]
	applied uint64        // last stream sequence applied
	changed chan struct{} // closed and replaced whenever applied moves
}

type records[T any] struct {
	byID map[string]*T
	ids  []string // sorted
}

func newRegistry[T any](subj Subjects, log *slog.Logger, aggType string, f fold[T]) *registry[T] {
	return &registry[T]{aggType: aggType, filter: subj.Event(RootEvents, "*", aggType, "*", "*"),
		subj: subj, fold: f, log: log, tenants: map[string]*records[T]{}, changed: make(chan struct{})}
}

// replayBatch is how many events one read of the log returns.
const replayBatch = 500

// start replays the log into the registry, then follows it.
func (r *registry[T]) start(ctx context.Context, log bus.Log) error {
	r.mu.Lock()
	err := r.catchUpLocked(ctx, log, 0)
	from := r.applied + 1
	r.mu.Unlock()
	if err != nil {
		return err
	}
	log.Follow(ctx, r.filter, from, r.apply)
	return nil
}

// rebuild drops every record and replays the log from the start. Readers
// wait meanwhile; the live feed goes on afterwards without a gap.
func (r *registry[T]) rebuild(ctx context.Context, log bus.Log) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	target := r.applied
	r.tenants, r.applied = map[string]*records[T]{}, 0
	return r.catchUpLocked(ctx, log, target)
}

// catchUpLocked applies the log until nothing more is stored and at least
// target was applied (a lagging replica may answer reads with less).
func (r *registry[T]) catchUpLocked(ctx context.Context, log bus.Log, target uint64) error {
	for {
		msgs, err := log.Range(ctx, r.filter, r.applied+1, replayBatch)
		if err != nil {
			return fmt.Errorf("%s registry: replay from %d: %w", r.aggType, r.applied+1, err)
		}
		for _, m := range msgs {
			r.applyLocked(m)
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

func (r *registry[T]) apply(m *bus.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applyLocked(m)
}

// applyLocked applies one event. Events agentbus would not write (any
// NATS publisher can append to the log) are skipped with a warning: a
// subject whose tenant or id is not valid, an envelope that does not
// decode, or one the fold refuses.
func (r *registry[T]) applyLocked(m *bus.Message) {
	if m.Seq <= r.applied {
		return // replayed before the feed started, or delivered twice
	}
	r.applied = m.Seq
	close(r.changed)
	r.changed = make(chan struct{})
	tenant, aggType, id, typ, ok := r.subj.ParseEvent(m.Subject)
	if !ok || aggType != r.aggType { // the filter delivers only this aggregate's subjects
		r.skip(m, "the subject's tenant or id is not valid")
		return
	}
	data, err := eventData(m)
	if err != nil {
		r.skip(m, "the envelope does not decode")
		return
	}
	recs := r.tenants[tenant]
	var cur *T
	if recs != nil {
		cur = recs.byID[id]
	}
	next, ok := r.fold(cur, id, typ, data)
	if !ok {
		r.skip(m, "data does not decode, data.id is not the subject's id, or a registration lists something that is not a message type")
		return
	}
	if next == cur {
		return
	}
	if recs == nil {
		recs = &records[T]{byID: map[string]*T{}}
		r.tenants[tenant] = recs
	}
	switch {
	case next == nil:
		delete(recs.byID, id)
		if i, found := slices.BinarySearch(recs.ids, id); found {
			recs.ids = slices.Delete(recs.ids, i, i+1)
		}
	default:
		if cur == nil {
			i, _ := slices.BinarySearch(recs.ids, id)
			recs.ids = slices.Insert(recs.ids, i, id)
		}
		recs.byID[id] = next
	}
}

func (r *registry[T]) skip(m *bus.Message, why string) {
	r.log.Warn(r.aggType+" registry: event skipped", "subject", m.Subject, "seq", m.Seq, "reason", why)
}

// waitApplied returns once the registry has applied the log up to seq, or
// with ctx's error.
func (r *registry[T]) waitApplied(ctx context.Context, seq uint64) error {
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

func (r *registry[T]) get(tenant, id string) (T, bool) {
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

// list returns up to limit records of tenant with ids after after, in id
// order, and the cursor of the next page ("" when this is the last one).
func (r *registry[T]) list(tenant, after string, limit int) ([]T, string) {
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

// each calls fn for every record of tenant, in id order, until fn returns
// false.
func (r *registry[T]) each(tenant string, fn func(T) bool) {
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

// StartRegistries builds the agents and services registries from the event
// log and keeps them current until ctx ends. It returns once both have
// replayed everything stored, so a replica answers reads only with complete
// registries.
func (a *App) StartRegistries(ctx context.Context) error {
	if err := a.ctl.agents.start(ctx, a.p.Events); err != nil {
		return err
	}
	return a.ctl.services.start(ctx, a.p.Events)
}

// RebuildRegistries drops both registries and replays them from the event
// log, as a restart does. Reads wait while it runs.
func (a *App) RebuildRegistries(ctx context.Context) error {
	if err := a.ctl.agents.rebuild(ctx, a.p.Events); err != nil {
		return err
	}
	return a.ctl.services.rebuild(ctx, a.p.Events)
}
