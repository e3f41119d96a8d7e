package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/google/uuid"
)

// Subscription is what delivery needs of one subscription.
type Subscription struct {
	Tenant, ID string
	URL        string
	// Types are the event types delivered; empty: every event of the
	// tenant.
	Types []string
	// Active is false while the subscription is disabled: nothing is
	// delivered, and its cursor waits. Failing says an event of it was
	// dead-lettered since it was last active. Since is when its status
	// last changed.
	Active, Failing bool
	Since           time.Time
}

// Subscriptions lists the subscriptions of every tenant (the registry).
type Subscriptions interface {
	All() []Subscription
	// Start returns the sequence of the last event before a
	// subscription's first: its delivery starts after it.
	Start(ctx context.Context, tenant, id string) (uint64, error)
}

// Secrets returns a subscription's signing keys: the current one first,
// and the previous one while a rotation's overlap lasts. An error fails
// the attempt (it is retried).
type Secrets interface {
	Signing(ctx context.Context, tenant, id string) ([][]byte, error)
}

// Outcomes records what delivery decides about a subscription (agentbus
// submits the matching control commands, so the decision is an event).
// eventSeq names the event that led to it, so a repeated report is the
// same command.
type Outcomes interface {
	// Disable disables a subscription whose receiver answered 410 Gone.
	Disable(ctx context.Context, tenant, id string, eventSeq uint64, reason string) error
	// Failing marks a subscription failing: an event was dead-lettered.
	Failing(ctx context.Context, tenant, id string, eventSeq uint64, reason string) error
	// Recovered marks a failing subscription active again: an event was
	// delivered.
	Recovered(ctx context.Context, tenant, id string, eventSeq uint64) error
}

// Config tunes a Dispatcher. Zero values take the defaults noted.
type Config struct {
	Prefix string // subject prefix; default "agentbus"
	// Backoff is the retry schedule (default DefaultSchedule, jitter 0.2,
	// Retry-After honoured up to 1 h).
	Backoff Backoff
	// Timeout bounds one attempt (default 15 s); MaxResponseBytes what is
	// read of an answer (0: 64 KiB; below 0, nothing), of which the first
	// KiB is kept.
	Timeout          time.Duration
	MaxResponseBytes int64
	// MaxInFlight bounds the requests in flight (default 256).
	MaxInFlight int
	// Lease is how long a lease lasts unless renewed (default 15 s); Scan
	// how often the subscriptions are read and leases taken and renewed,
	// and how soon a worker waiting for a retry sees an operator's replay
	// or redelivery (default 2 s).
	Lease, Scan time.Duration
	// Holder names this replica in leases (default a random id).
	Holder string
	// UserAgent is sent with each delivery (default "agentbus-webhooks").
	UserAgent string
}

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = "agentbus"
	}
	if c.Backoff.Schedule == nil {
		c.Backoff = Backoff{Schedule: DefaultSchedule, Jitter: 0.2, MaxRetryAfter: time.Hour}
	}
	if c.Timeout <= 0 {
		c.Timeout = 15 * time.Second
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = 64 << 10
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 256
	}
	if c.Lease <= 0 {
		c.Lease = 15 * time.Second
	}
	if c.Scan <= 0 {
		c.Scan = 2 * time.Second
	}
	if c.Holder == "" {
		c.Holder = uuid.NewString()
	}
	if c.UserAgent == "" {
		c.UserAgent = "agentbus-webhooks"
	}
}

// Ports are what a Dispatcher reads and writes.
type Ports struct {
	Events      bus.Log // the event log (production events only)
	DeadLetters bus.Log // where events are dead-lettered
	State       bus.KV  // cursors and leases
	Deliveries  *Deliveries
	Subs        Subscriptions
	Secrets     Secrets
	Outcomes    Outcomes
	Client      *http.Client
	// Live hands out the events as they are stored, for the window of
	// recent events (the replica's follower of the log); nil: the
	// dispatcher follows Events itself.
	Live bus.Tail
}

// Dispatcher delivers the subscriptions whose leases it holds. Start it
// with Run.
type Dispatcher struct {
	cfg  Config
	p    Ports
	subj bus.Subjects
	log  *slog.Logger
	now  func() time.Time
	rnd  func() float64
	sem  chan struct{}
	// recent is the latest events followed, which workers read before the
	// log (set by Run before any worker starts).
	recent *recent

	mu      sync.Mutex
	workers map[string]*worker // by lease key
	// byTenant is workers by tenant, for wake, which runs for every
	// event followed.
	byTenant map[string]map[*worker]struct{}
}

// New returns a Dispatcher.
func New(cfg Config, p Ports, log *slog.Logger) *Dispatcher {
	cfg.defaults()
	return &Dispatcher{cfg: cfg, p: p, subj: bus.Subjects{Prefix: cfg.Prefix}, log: log, now: time.Now,
		rnd: rand.Float64, sem: make(chan struct{}, cfg.MaxInFlight), workers: map[string]*worker{},
		byTenant: map[string]map[*worker]struct{}{}}
}

// Run delivers until ctx ends, then releases its leases (best effort) and
// returns once its workers have stopped.
func (d *Dispatcher) Run(ctx context.Context) {
	// The window of recent events starts at the log's end: read again
	// until it is known, rather than taking in the whole log.
	last, err := d.p.Events.LastSeq(ctx)
	for err != nil {
		d.log.Warn("webhooks: reading the event log's end; trying again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		last, err = d.p.Events.LastSeq(ctx)
	}
	d.recent = newRecent(last + 1)
	// Every event of the log, whatever its subject's shape, so that recent
	// holds all that a worker's filter could take.
	live := d.p.Live
	if live == nil {
		live = bus.LogTail(d.p.Events, d.subj)
	}
	live.Follow(ctx, d.cfg.Prefix+"."+bus.RootEvents+".>", last+1, d.followed)
	tick := time.NewTicker(d.cfg.Scan)
	defer tick.Stop()
	var wg sync.WaitGroup
	for {
		d.scan(ctx, &wg)
		select {
		case <-ctx.Done():
			d.mu.Lock()
			for _, w := range d.workers {
				w.stop()
			}
			d.mu.Unlock()
			wg.Wait()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			d.mu.Lock()
			for key, w := range d.workers {
				d.release(rctx, key, w.leaseRev)
			}
			d.mu.Unlock()
			cancel()
			return
		case <-tick.C:
		}
	}
}

// followed keeps the next event of the log in recent and nudges the
// workers of its tenant.
func (d *Dispatcher) followed(ev *bus.Event) {
	id, typ, _ := ev.Envelope()
	d.recent.add(newItem(ev.Message, ev.Seq, 0, id, typ))
	d.wake(ev)
}

// wake nudges the workers of the tenant an event belongs to.
func (d *Dispatcher) wake(ev *bus.Event) {
	if !ev.Parsed {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.byTenant[ev.Tenant] {
		w.nudge()
	}
}

// lease is a lease's value.
type lease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

func leaseKey(tenant, id string) string  { return "lease." + tenant + "." + id }
func cursorKey(tenant, id string) string { return "cursor." + tenant + "." + id }

// scan takes and renews leases for the subscriptions listed, and stops the
// workers of subscriptions gone or leases lost.
func (d *Dispatcher) scan(ctx context.Context, wg *sync.WaitGroup) {
	seen := map[string]bool{}
	for _, s := range d.p.Subs.All() {
		key := leaseKey(s.Tenant, s.ID)
		seen[key] = true
		d.mu.Lock()
		w := d.workers[key]
		d.mu.Unlock()
		if w != nil {
			w.sub.Store(&s)
			if d.due(w) && !d.renew(ctx, key, w) {
				d.drop(key, w)
			}
			continue
		}
		until := d.now().Add(d.cfg.Lease)
		rev, ok := d.take(ctx, key, until)
		if !ok {
			continue
		}
		d.startWorker(ctx, key, s, rev, until, wg)
	}
	d.mu.Lock()
	var gone []string
	for key := range d.workers {
		if !seen[key] {
			gone = append(gone, key)
		}
	}
	d.mu.Unlock()
	for _, key := range gone {
		d.mu.Lock()
		w := d.workers[key]
		d.mu.Unlock()
		d.drop(key, w)
		// The subscription is deleted: its cursor and lease go with it.
		_ = d.p.State.Delete(ctx, cursorKey(w.tenant, w.id))
		_ = d.p.State.Delete(ctx, key)
	}
}

func (d *Dispatcher) drop(key string, w *worker) {
	w.stop()
	d.mu.Lock()
	if d.workers[key] == w {
		delete(d.workers, key)
		delete(d.byTenant[w.tenant], w)
		if len(d.byTenant[w.tenant]) == 0 {
			delete(d.byTenant, w.tenant)
		}
	}
	d.mu.Unlock()
}

// kvWait bounds each lease read or write of a scan, so that a slow bucket
// cannot make one scan outlast the leases it renews.
const kvWait = 2 * time.Second

// take takes the lease of key, until then, when it is free or expired.
func (d *Dispatcher) take(ctx context.Context, key string, until time.Time) (uint64, bool) {
	ctx, cancel := context.WithTimeout(ctx, kvWait)
	defer cancel()
	val := mustJSON(lease{Holder: d.cfg.Holder, Until: until})
	raw, rev, err := d.p.State.Get(ctx, key)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		nrev, err := d.p.State.Create(ctx, key, val)
		return nrev, err == nil
	case err != nil:
		return 0, false
	}
	var l lease
	if json.Unmarshal(raw, &l) == nil && l.Holder != d.cfg.Holder && d.now().Before(l.Until) {
		return 0, false // held by another replica
	}
	nrev, err := d.p.State.Update(ctx, key, val, rev)
	return nrev, err == nil
}

// due reports whether a held lease is to be renewed at this scan: once
// less than half of it is left (every scan when the lease is shorter than
// six scans), so that it is renewed a few scans before its worker would
// stop (held) and a failed renewal is tried again at the next scans. A
// replica holding 1,000 idle subscriptions wrote 500 renewals a second
// renewing at every scan (2 s) a lease of 15 s; it writes about 125.
func (d *Dispatcher) due(w *worker) bool {
	left := time.Until(time.Unix(0, w.leaseUntil.Load()))
	return left < max(d.cfg.Lease/2, 3*d.cfg.Scan)
}

// renew extends a held lease; false when it is lost. A renewal that fails
// otherwise keeps the lease until it expires: the worker delivers nothing
// past that (worker.held), since another replica may take it then.
func (d *Dispatcher) renew(ctx context.Context, key string, w *worker) bool {
	ctx, cancel := context.WithTimeout(ctx, kvWait)
	defer cancel()
	until := d.now().Add(d.cfg.Lease)
	rev, err := d.p.State.Update(ctx, key, mustJSON(lease{Holder: d.cfg.Holder, Until: until}), w.leaseRev)
	if err != nil {
		if !errors.Is(err, errs.ErrConflict) && ctx.Err() == nil {
			d.log.Warn("webhooks: renewing a lease failed; keeping it until it expires", "lease", key, "err", err)
			return true
		}
		return false
	}
	w.leaseRev = rev
	w.leaseUntil.Store(until.UnixNano())
	return true
}

// release gives a lease up so that another replica takes it at once.
func (d *Dispatcher) release(ctx context.Context, key string, rev uint64) {
	val := mustJSON(lease{Holder: "", Until: time.Time{}})
	_, _ = d.p.State.Update(ctx, key, val, rev)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// cursor is where a subscription's delivery stands.
type cursor struct {
	// Seq is the last event settled: delivered or dead-lettered.
	Seq uint64 `json:"seq"`
	// Attempt counts the failed attempts of the next item; NextAt is when
	// it is tried again.
	Attempt int       `json:"attempt,omitempty"`
	NextAt  time.Time `json:"nextAt,omitzero"`
	// Redeliver asks for the dead letters up to this sequence of the
	// dead-letter log to be delivered again, before new events;
	// Redelivered is how far that went.
	Redeliver   uint64 `json:"redeliver,omitempty"`
	Redelivered uint64 `json:"redelivered,omitempty"`
	// Gone says the receiver answered 410 (at GoneAt): nothing is
	// delivered until the subscription is enabled again — its status
	// changes after GoneAt, to active (or Enable) — from the event it
	// refused.
	Gone   bool      `json:"gone,omitempty"`
	GoneAt time.Time `json:"goneAt,omitzero"`
}

// worker delivers one subscription.
type worker struct {
	d        *Dispatcher
	tenant   string
	id       string
	sub      atomic.Pointer[Subscription]
	leaseRev uint64 // touched by the scan loop only
	wakeCh   chan struct{}
	cancel   context.CancelFunc
	// leaseUntil is when the lease held expires (Unix nanoseconds),
	// unless renewed.
	leaseUntil atomic.Int64

	// The worker's own state, touched by its loop only: the cursor as it
	// was read (rev) and moved since (dirty, written by flush at most
	// every flushEvery, so a crash repeats at most that much, with the
	// same webhook-ids); the next events read ahead; the current item's
	// delivery record; the records sent and not known stored yet (flush
	// waits for them before it writes the cursor past their deliveries).
	cur       cursor
	rev       uint64
	loaded    bool
	loadedAt  time.Time
	dirty     bool
	flushedAt time.Time
	ahead     []*item
	rec       *Delivery
	sent      []*sentRecord
	// skip is where the last search of recent found nothing, with the
	// filters skipFor: no event after skipFrom up to it matches them.
	skip, skipFrom uint64
	skipFor        string
	// readAt is when the worker last read the log for its next events.
	readAt time.Time
}

// flushEvery is how long a moved cursor may wait in memory before it is
// written; readAhead how many events one read of the log takes (one while
// the next is being retried, so a worker waiting on a receiver that is
// down holds one event); maxSent how many delivery records a worker has
// in flight before flush waits for them.
const (
	flushEvery     = 100 * time.Millisecond
	readAhead      = 32
	readAheadBytes = 256 << 10
	maxSent        = 512
)

func (d *Dispatcher) startWorker(ctx context.Context, key string, s Subscription, rev uint64, until time.Time, wg *sync.WaitGroup) {
	wctx, cancel := context.WithCancel(ctx)
	w := &worker{d: d, tenant: s.Tenant, id: s.ID, leaseRev: rev, wakeCh: make(chan struct{}, 1), cancel: cancel}
	w.leaseUntil.Store(until.UnixNano())
	w.sub.Store(&s)
	d.mu.Lock()
	d.workers[key] = w
	if d.byTenant[w.tenant] == nil {
		d.byTenant[w.tenant] = map[*worker]struct{}{}
	}
	d.byTenant[w.tenant][w] = struct{}{}
	d.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.run(wctx)
	}()
}

func (w *worker) stop() { w.cancel() }

func (w *worker) nudge() {
	select {
	case w.wakeCh <- struct{}{}:
	default:
	}
}

// wait returns after d or a nudge: true for a nudge, false when d passed
// or ctx ended.
func (w *worker) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-w.wakeCh:
		return true
	case <-t.C:
		return false
	}
}

// run is the worker's loop: settle the next item, one at a time.
func (w *worker) run(ctx context.Context) {
	d := w.d
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		w.flush(fctx, w.sub.Load())
	}()
	for ctx.Err() == nil {
		s := w.sub.Load()
		if !s.Active {
			w.flush(ctx, s)
			w.loaded = false
			w.wait(ctx, d.cfg.Scan)
			continue
		}
		if !w.loaded {
			c, rev, err := w.cursor(ctx, s)
			if err != nil {
				if ctx.Err() == nil {
					d.log.Warn("webhooks: reading a cursor failed", "subscription", s.ID, "tenant", s.Tenant, "err", err)
				}
				w.wait(ctx, d.cfg.Scan)
				continue
			}
			w.cur, w.rev, w.loaded, w.loadedAt, w.ahead, w.rec = c, rev, true, time.Now(), nil, nil
		}
		if w.cur.Gone && s.Since.After(w.cur.GoneAt) {
			// Enabled after the 410 (its status changed since, and it is
			// active): go on from the refused event.
			w.cur.Gone, w.cur.GoneAt, w.cur.Attempt, w.cur.NextAt, w.dirty = false, time.Time{}, 0, time.Time{}, true
		}
		if w.cur.Gone {
			w.flush(ctx, s)
			w.loaded = false
			w.wait(ctx, d.cfg.Scan)
			continue
		}
		redelivering := w.cur.Redelivered < w.cur.Redeliver
		it, err := w.next(ctx, s, &w.cur)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("webhooks: reading the next event failed", "subscription", s.ID, "tenant", s.Tenant, "err", err)
			}
			w.wait(ctx, d.cfg.Scan)
			continue
		}
		if redelivering && w.cur.Redelivered == w.cur.Redeliver {
			// The dead letters to redeliver are done: say so, then go on
			// with the events.
			w.dirty = true
			w.flush(ctx, s)
			continue
		}
		if it == nil {
			w.flush(ctx, s)
			w.wait(ctx, d.cfg.Scan)
			if time.Since(w.loadedAt) >= d.cfg.Scan {
				// Every scan, read the cursor again, which an operator may
				// have moved (replay, redelivery, enable): nudges by the
				// tenant's other events must not put that off.
				w.loaded = false
			}
			continue
		}
		if !w.held() {
			w.wait(ctx, d.cfg.Scan) // the lease may have passed to another replica
			w.loaded = false
			continue
		}
		if until := w.cur.NextAt.Sub(d.now()); until > 0 {
			// A retry not due yet. The cursor is read again every scan
			// meanwhile: an operator's replay or redelivery resets it, and
			// must not wait for the retry (hours, late in the schedule).
			w.flush(ctx, s)
			w.ahead = nil
			w.waitUntil(ctx, min(until, d.cfg.Scan))
			w.loaded = false
			continue
		}
		w.settle(ctx, s, it)
		if w.dirty && (w.cur.Attempt > 0 || len(w.sent) >= maxSent || time.Since(w.flushedAt) >= flushEvery) {
			w.flush(ctx, s)
		}
	}
}

// flush writes the cursor when it moved, once the records of the
// deliveries it passes are stored: a crash loses no record of a delivery
// before the cursor written (those after it are delivered again, and
// recorded again). When someone else changed the cursor meanwhile (an
// operator, or a replica that took the lease over), the worker reads it
// again and goes on from there: what it delivered since its last flush
// may be delivered again.
func (w *worker) flush(ctx context.Context, s *Subscription) {
	if !w.stored(ctx) {
		return // stopping: the cursor stays where the records are
	}
	if !w.dirty {
		return
	}
	rev, err := w.d.p.State.Update(ctx, cursorKey(s.Tenant, s.ID), mustJSON(w.cur), w.rev)
	switch {
	case err == nil:
		w.rev, w.dirty, w.flushedAt = rev, false, time.Now()
	case errors.Is(err, errs.ErrConflict):
		w.loaded, w.dirty, w.ahead, w.rec = false, false, nil, nil
	default:
		if ctx.Err() == nil {
			w.d.log.Warn("webhooks: writing a cursor failed; trying again", "subscription", s.ID, "tenant", s.Tenant, "err", err)
		}
	}
}

// stored waits for the records the worker sent; false when ctx ended
// first.
func (w *worker) stored(ctx context.Context) bool {
	if len(w.sent) == 0 {
		return true
	}
	if !w.d.p.Deliveries.stored(ctx, w.sent) {
		return false
	}
	clear(w.sent)
	w.sent = w.sent[:0]
	return true
}

// held reports whether the worker's lease still holds, with a margin of
// a scan.
func (w *worker) held() bool {
	return time.Now().Add(w.d.cfg.Scan).UnixNano() < w.leaseUntil.Load()
}

// waitUntil sleeps for d without waking on nudges (new events do not
// bring a retry forward).
func (w *worker) waitUntil(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// cursor reads the subscription's cursor, creating it at its start.
func (w *worker) cursor(ctx context.Context, s *Subscription) (cursor, uint64, error) {
	key := cursorKey(s.Tenant, s.ID)
	raw, rev, err := w.d.p.State.Get(ctx, key)
	if errors.Is(err, errs.ErrNotFound) {
		from, err := w.d.p.Subs.Start(ctx, s.Tenant, s.ID)
		if err != nil {
			return cursor{}, 0, fmt.Errorf("where subscription %s starts: %w", s.ID, err)
		}
		c := cursor{Seq: from}
		rev, err = w.d.p.State.Create(ctx, key, mustJSON(c))
		if errors.Is(err, errs.ErrConflict) {
			return w.cursor(ctx, s)
		}
		return c, rev, err
	}
	if err != nil {
		return cursor{}, 0, err
	}
	var c cursor
	if err := json.Unmarshal(raw, &c); err != nil {
		return cursor{}, 0, fmt.Errorf("cursor %s: %w", key, err)
	}
	return c, rev, nil
}

// item is one thing to deliver: an event, or a dead letter again.
type item struct {
	m         *bus.Message // the event as stored (or as dead-lettered)
	eventSeq  uint64       // in the event log
	deadSeq   uint64       // in the dead-letter log, when redelivered
	eventID   string
	corr      string
	eventType string
}

// next returns the next item after c, or nil when there is none now. When
// no dead letter is left to redeliver it moves c.Redelivered up to
// c.Redeliver (the caller saves that).
func (w *worker) next(ctx context.Context, s *Subscription, c *cursor) (*item, error) {
	d := w.d
	if c.Redelivered < c.Redeliver {
		msgs, err := d.p.DeadLetters.Range(ctx, deadSubject(d.cfg.Prefix, s.Tenant, s.ID), c.Redelivered+1, 1)
		if err != nil {
			return nil, err
		}
		if len(msgs) > 0 && msgs[0].Seq <= c.Redeliver {
			m := msgs[0]
			seq, _ := strconv.ParseUint(m.Header.Get(HeaderEventSeq), 10, 64)
			return d.itemOf(m, seq, m.Seq), nil
		}
		c.Redelivered = c.Redeliver
	}
	for len(w.ahead) > 0 && w.ahead[0].eventSeq <= c.Seq {
		w.ahead = w.ahead[1:] // settled
	}
	if len(w.ahead) > 0 {
		return w.ahead[0], nil
	}
	filters := []string{d.subj.TenantEvents(bus.RootEvents, s.Tenant)}
	if len(s.Types) > 0 {
		filters = filters[:0]
		for _, t := range s.Types {
			filters = append(filters, d.subj.EventsOfType(bus.RootEvents, s.Tenant, t))
		}
	}
	n := readAhead
	if c.Attempt > 0 {
		n = 1 // retrying: hold the one event, not a run behind it
	}
	if d.recent != nil {
		// The events followed last hold every event after the cursor, or
		// some of them: the next items, in order, without a read. Where a
		// search with the same filters found nothing, the next starts.
		key := strings.Join(filters, " ")
		if key != w.skipFor || c.Seq < w.skipFrom {
			w.skip, w.skipFor = 0, key // other filters, or a cursor moved back
		}
		its, last, held := d.recent.after(c.Seq, w.skip, filters, n, readAheadBytes)
		if len(its) > 0 {
			w.ahead = append(w.ahead, its...)
			return w.ahead[0], nil
		}
		if held {
			if w.skip == 0 {
				w.skipFrom = c.Seq
			}
			w.skip = last
			if time.Since(w.readAt) < d.cfg.Lease {
				// Nothing followed yet: the follow nudges this worker when
				// there is. The log is read anyway once a lease (15 s),
				// should the follow lag.
				return nil, nil
			}
		}
	}
	w.readAt = time.Now()
	if len(filters) == 1 {
		// One filter reads a run of its matches ahead: they are the next
		// items, in order, until the cursor moves elsewhere.
		msgs, err := d.p.Events.Range(ctx, filters[0], c.Seq+1, n)
		if err != nil || len(msgs) == 0 {
			return nil, err
		}
		size := 0
		for _, m := range msgs {
			if size += len(m.Data); size > readAheadBytes && len(w.ahead) > 0 {
				break // large events: hold fewer
			}
			w.ahead = append(w.ahead, d.itemOf(m, m.Seq, 0))
		}
		return w.ahead[0], nil
	}
	var first *bus.Message
	for _, f := range filters {
		msgs, err := d.p.Events.Range(ctx, f, c.Seq+1, 1)
		if err != nil {
			return nil, err
		}
		if len(msgs) > 0 && (first == nil || msgs[0].Seq < first.Seq) {
			first = msgs[0]
		}
	}
	if first == nil {
		return nil, nil
	}
	return d.itemOf(first, first.Seq, 0), nil
}

func (d *Dispatcher) itemOf(m *bus.Message, eventSeq, deadSeq uint64) *item {
	var env struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	_ = json.Unmarshal(m.Data, &env)
	return newItem(m, eventSeq, deadSeq, env.ID, env.Type)
}

// newItem is the item of m, whose envelope's id and type are id and typ.
func newItem(m *bus.Message, eventSeq, deadSeq uint64, id, typ string) *item {
	it := &item{m: m, eventSeq: eventSeq, deadSeq: deadSeq, eventID: m.Header.Get(bus.HeaderMsgID),
		corr: m.Header.Get(bus.HeaderCorrelationID), eventType: typ}
	if id != "" {
		it.eventID = id // the envelope's id: what receivers see in the body
	}
	return it
}

// Headers on dead letters.
const (
	HeaderSubscription = "Agentbus-Subscription"
	HeaderEventSeq     = "Agentbus-Event-Seq"
	HeaderError        = "Agentbus-Error"
)

// deadSubject is the subject of subscription id's dead letters.
func deadSubject(prefix, tenant, id string) string {
	return prefix + ".dlq." + tenant + "." + id
}

// settle tries the item once, moves the worker's cursor by what happened
// (written by flush) and sends the attempt's record, which says failed
// when the item was dead-lettered.
func (w *worker) settle(ctx context.Context, s *Subscription, it *item) {
	c := &w.cur
	d := w.d
	res := d.deliver(ctx, s, it)
	if ctx.Err() != nil {
		return // stopping: the attempt is not counted, the item comes again
	}
	w.dirty = true
	prior := w.priorRecord(it)
	if prior == nil {
		w.stored(ctx) // the record is read: what was sent of it first
	}
	status := Retrying
	done := func() {
		if it.deadSeq > 0 {
			c.Redelivered = it.deadSeq
		} else {
			c.Seq = it.eventSeq
		}
		c.Attempt, c.NextAt = 0, time.Time{}
	}
	switch {
	case res.ok():
		status = Delivered
		done()
		if s.Failing && it.deadSeq == 0 {
			if err := d.p.Outcomes.Recovered(ctx, s.Tenant, s.ID, it.eventSeq); err != nil {
				d.log.Warn("webhooks: marking a subscription active again failed", "subscription", s.ID, "tenant", s.Tenant, "err", err)
			}
			recovered := *s
			recovered.Failing = false
			w.sub.CompareAndSwap(s, &recovered) // until the registry says so too
		}
	case res.Status == http.StatusGone:
		reason := fmt.Sprintf("the receiver answered 410 Gone for event %s", it.eventID)
		if err := d.p.Outcomes.Disable(ctx, s.Tenant, s.ID, it.eventSeq, reason); err != nil {
			d.log.Warn("webhooks: disabling a subscription failed; trying again", "subscription", s.ID, "tenant", s.Tenant, "err", err)
			c.NextAt = d.now().Add(d.cfg.Scan)
			break
		}
		c.Gone, c.GoneAt, c.Attempt, c.NextAt = true, d.now(), 0, time.Time{}
	default:
		c.Attempt++
		wait, retry := d.cfg.Backoff.Wait(c.Attempt, res.retryAfter, d.rnd())
		if retry {
			c.NextAt = d.now().Add(wait)
			break
		}
		reason := fmt.Sprintf("event %s not delivered after %d attempts: %s", it.eventID, c.Attempt, res.summary())
		if err := d.deadLetter(ctx, s, it, reason); err != nil {
			d.log.Warn("webhooks: dead-lettering failed; trying again", "subscription", s.ID, "tenant", s.Tenant, "err", err)
			c.Attempt-- // the last attempt again, later
			c.NextAt = d.now().Add(d.cfg.Scan)
			break
		}
		status = Failed
		if err := d.p.Outcomes.Failing(ctx, s.Tenant, s.ID, it.eventSeq, reason); err != nil {
			d.log.Warn("webhooks: marking a subscription failing failed", "subscription", s.ID, "tenant", s.Tenant, "err", err)
		} else {
			failing := *s
			failing.Failing = true
			w.sub.CompareAndSwap(s, &failing) // until the registry says so too
		}
		done()
	}
	var sent *sentRecord
	w.rec, sent = d.p.Deliveries.record(ctx, s, it, res, prior, status)
	if sent != nil {
		w.sent = append(w.sent, sent)
	}
}

// priorRecord returns what is known of the item's delivery record before
// this attempt: the worker's copy, nothing for an event tried for the
// first time, else nil to read it (after a restart, say).
func (w *worker) priorRecord(it *item) *Delivery {
	switch {
	case w.rec != nil && w.rec.EventSeq == it.eventSeq && w.rec.Subscription == w.sub.Load().ID:
		return w.rec
	case w.cur.Attempt == 0 && it.deadSeq == 0:
		return &Delivery{}
	}
	return nil
}

func (d *Dispatcher) deadLetter(ctx context.Context, s *Subscription, it *item, reason string) error {
	m := &bus.Message{Subject: deadSubject(d.cfg.Prefix, s.Tenant, s.ID), Data: it.m.Data, Header: bus.Header{
		HeaderSubscription: {s.ID},
		HeaderEventSeq:     {strconv.FormatUint(it.eventSeq, 10)},
		HeaderError:        {truncate(reason, 512)},
	}}
	if it.corr != "" {
		m.Header.Set(bus.HeaderCorrelationID, it.corr)
	}
	_, err := d.p.DeadLetters.Append(ctx, []*bus.Message{m}, nil)
	return err
}

// result is one attempt's outcome.
type result struct {
	At         time.Time
	Status     int // 0: no answer
	Latency    time.Duration
	Err        string
	Response   string // the first KiB of the answer
	retryAfter time.Duration
}

func (r result) ok() bool { return r.Status >= 200 && r.Status < 300 }

func (r result) summary() string {
	if r.Err != "" {
		return r.Err
	}
	return "status " + strconv.Itoa(r.Status)
}

// deliver makes one attempt.
func (d *Dispatcher) deliver(ctx context.Context, s *Subscription, it *item) result {
	res := result{At: d.now()}
	keys, err := d.p.Secrets.Signing(ctx, s.Tenant, s.ID)
	if err != nil {
		res.Err = "no signing key: " + err.Error()
		return res
	}
	select {
	case d.sem <- struct{}{}:
		defer func() { <-d.sem }()
	case <-ctx.Done():
		return res
	}
	actx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, s.URL, bytes.NewReader(it.m.Data))
	if err != nil {
		res.Err = "request: " + err.Error()
		return res
	}
	at := d.now()
	// Set in canonical form as they are (Header.Set would canonicalise
	// each name for each delivery).
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["User-Agent"] = []string{d.cfg.UserAgent}
	req.Header["Webhook-Id"] = []string{it.eventID}
	req.Header["Webhook-Timestamp"] = []string{strconv.FormatInt(at.Unix(), 10)}
	if len(keys) > 0 {
		req.Header["Webhook-Signature"] = []string{Signature(keys, it.eventID, at, it.m.Data)}
	}
	start := time.Now()
	resp, err := d.p.Client.Do(req)
	if err != nil {
		res.Latency, res.Err = time.Since(start), describe(err)
		return res
	}
	// The status decides the attempt; the body is read only for the
	// record, up to the bound, and the rest is never read (closing the
	// body closes the connection).
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, d.cfg.MaxResponseBytes))
	resp.Body.Close()
	res.Latency, res.Status = time.Since(start), resp.StatusCode
	res.Response = string(truncate(body, 1024))
	res.retryAfter = RetryAfter(resp.StatusCode, resp.Header, d.now())
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		res.Err = "redirect to " + truncate(resp.Header.Get("Location"), 256) + " not followed"
	case rerr != nil:
		res.Err = "reading the answer: " + describe(rerr)
	}
	return res
}

// describe says why a request got no answer, without the URL (which the
// record names already).
func describe(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	var oerr *net.OpError
	if errors.As(err, &oerr) && oerr.Err != nil {
		// Without the address dialled: a name the tenant chose may
		// resolve to an internal one, which is not theirs to learn.
		return truncate(oerr.Op+": "+oerr.Err.Error(), 512)
	}
	return truncate(err.Error(), 512)
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate[T ~string | ~[]byte](s T, n int) T {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
