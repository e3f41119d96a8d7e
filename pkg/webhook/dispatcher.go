package webhook

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/webhook/record"
	"github.com/agentbus/agentbus/pkg/webhook/send"
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
	// Skip lists the subjects of events never delivered to the
	// subscription: those about its own delivery state (its
	// SubscriptionFailing, say), which a receiver that fails would fail
	// too, be marked failing again for, and be sent again, without end.
	// Delivery passes over them as if delivered, with no attempt and no
	// record. A dead letter redelivered is not passed over.
	Skip []string
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
	// Backoff is the retry schedule (default send.DefaultSchedule, jitter 0.2,
	// Retry-After honoured up to 1 h).
	Backoff send.Backoff
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
	// Now is the clock every time of delivery is read from (default
	// time.Now); waits run on the runtime's timers. Random is the source
	// of the retry schedule's jitter, a number in [0, 1) (default
	// math/rand/v2's Float64).
	Now    func() time.Time
	Random func() float64
}

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = "agentbus"
	}
	if c.Backoff.Schedule == nil {
		c.Backoff = send.Backoff{Schedule: send.DefaultSchedule, Jitter: 0.2, MaxRetryAfter: time.Hour}
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
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Random == nil {
		c.Random = rand.Float64
	}
}

// Ports are what a Dispatcher reads and writes.
type Ports struct {
	Events      bus.Log // the event log (production events only)
	DeadLetters bus.Log // where events are dead-lettered
	State       bus.KV  // cursors and leases
	Deliveries  *record.Deliveries
	Subs        Subscriptions
	Secrets     Secrets
	Outcomes    Outcomes
	Client      *http.Client
	// Live hands out the events as they are stored, for the window of
	// recent events (the replica's follower of the log); nil: the
	// dispatcher follows Events itself.
	Live bus.Tail
	// Observer, when set, is told of each attempt and dead letter.
	Observer Observer
}

// Observer hears what delivery does (metrics). Its methods are called
// from the subscriptions' workers and must not block.
type Observer interface {
	// Attempted is called after each attempt with what it led to
	// (record.Delivered, record.Retrying, record.Failed: dead-lettered, or "disabled": the
	// receiver answered 410 Gone) and how long the request took.
	Attempted(outcome string, took time.Duration)
	// DeadLettered is called for each event dead-lettered.
	DeadLettered()
}

// Backlog is the age of the oldest event a worker of this replica is
// delivering and has not delivered yet (waiting for a retry included),
// 0 when every subscription it delivers is caught up.
func (d *Dispatcher) Backlog() time.Duration {
	now := d.now().UnixNano()
	var oldest int64
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.workers {
		if t := w.waiting.Load(); t > 0 && (oldest == 0 || t < oldest) {
			oldest = t
		}
	}
	if oldest == 0 || oldest > now {
		return 0
	}
	return time.Duration(now - oldest)
}

// Dispatcher delivers the subscriptions whose leases it holds. Start it
// with Run. Its rooms: the lease table (lease.go), the cursors (cursor.go),
// the live tail (live.go) and read-ahead (readahead.go) of events, one HTTP
// attempt and the retry and dead-letter policy (pkg/webhook/send),
// which each subscription's worker (worker.go) applies (settle.go).
type Dispatcher struct {
	cfg    Config
	p      Ports
	subj   bus.Subjects
	log    *slog.Logger
	now    func() time.Time
	rnd    func() float64
	leases *leases
	http   *send.Sender
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
	if p.Live == nil {
		p.Live = bus.LogTail(p.Events, bus.Subjects{Prefix: cfg.Prefix})
	}
	return &Dispatcher{cfg: cfg, p: p, subj: bus.Subjects{Prefix: cfg.Prefix}, log: log, now: cfg.Now, rnd: cfg.Random,
		leases:  &leases{kv: p.State, holder: cfg.Holder, ttl: cfg.Lease, scan: cfg.Scan, now: cfg.Now},
		http:    send.NewSender(p.Client, p.Secrets, cfg.MaxInFlight, cfg.Timeout, cfg.MaxResponseBytes, cfg.UserAgent, cfg.Now),
		workers: map[string]*worker{}, byTenant: map[string]map[*worker]struct{}{}}
}

// Run delivers until ctx ends, then releases its leases (best effort) and
// returns once its workers have stopped.
func (d *Dispatcher) Run(ctx context.Context) {
	if !d.tail(ctx) {
		return
	}
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
				d.leases.release(rctx, key, w.leaseRev)
			}
			d.mu.Unlock()
			cancel()
			return
		case <-tick.C:
		}
	}
}

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
			if d.leases.due(w.until()) && !d.renew(ctx, key, w) {
				d.drop(key, w)
			}
			continue
		}
		rev, until, ok := d.leases.take(ctx, key)
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

// renew extends the lease of w; false when it is lost. A renewal that
// fails otherwise keeps the lease until it expires: the worker delivers
// nothing past that (worker.held), since another replica may take it then.
func (d *Dispatcher) renew(ctx context.Context, key string, w *worker) bool {
	rev, until, err := d.leases.renew(ctx, key, w.leaseRev)
	switch {
	case err == nil:
		w.leaseRev = rev
		w.leaseUntil.Store(until.UnixNano())
		return true
	case errors.Is(err, errs.ErrConflict), ctx.Err() != nil:
		return false
	}
	d.log.Warn("webhooks: renewing a lease failed; keeping it until it expires", "lease", key, "err", err)
	return true
}

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
