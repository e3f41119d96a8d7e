package webhook

import (
	"context"
	"github.com/agentbus/agentbus/pkg/webhook/record"
	"slices"
	"sync/atomic"
	"time"
)

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
	// waiting is when the item the worker is delivering was stored (Unix
	// nanoseconds; 0 when it has none): Dispatcher.Backlog.
	waiting atomic.Int64

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
	rec       *record.Delivery
	sent      []*record.Sent
	// skip is where the last search of recent found nothing, with the
	// filters skipFor: no event after skipFrom up to it matches them.
	skip, skipFrom uint64
	skipFor        string
	// readAt is when the worker last read the log for its next events.
	readAt time.Time
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

// held reports whether the worker's lease still holds, with a margin of
// a scan.
func (w *worker) held() bool { return w.d.leases.held(w.until()) }

// until is when the worker's lease expires unless renewed.
func (w *worker) until() time.Time { return time.Unix(0, w.leaseUntil.Load()) }

// run is the worker's loop: settle the next item, one at a time.
func (w *worker) run(ctx context.Context) {
	d := w.d
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		w.flush(fctx, w.sub.Load())
	}()
	defer w.waiting.Store(0)
	for ctx.Err() == nil {
		s := w.sub.Load()
		if !s.Active {
			w.waiting.Store(0)
			w.flush(ctx, s)
			w.loaded = false
			w.wait(ctx, d.cfg.Scan)
			continue
		}
		if !w.loaded {
			c, rev, err := w.loadCursor(ctx, s)
			if err != nil {
				if ctx.Err() == nil {
					d.log.Warn("webhooks: reading a cursor failed", "subscription", s.ID, "tenant", s.Tenant, "err", err)
				}
				w.wait(ctx, d.cfg.Scan)
				continue
			}
			w.cur, w.rev, w.loaded, w.loadedAt, w.ahead, w.rec = c, rev, true, d.now(), nil, nil
		}
		if w.cur.Gone && s.Since.After(w.cur.GoneAt) {
			// Enabled after the 410 (its status changed since, and it is
			// active): go on from the refused event.
			w.cur.Gone, w.cur.GoneAt, w.cur.Attempt, w.cur.NextAt, w.dirty = false, time.Time{}, 0, time.Time{}, true
		}
		if w.cur.Gone {
			w.waiting.Store(0)
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
			w.waiting.Store(0)
			w.flush(ctx, s)
			w.wait(ctx, d.cfg.Scan)
			if d.now().Sub(w.loadedAt) >= d.cfg.Scan {
				// Every scan, read the cursor again, which an operator may
				// have moved (replay, redelivery, enable): nudges by the
				// tenant's other events must not put that off.
				w.loaded = false
			}
			continue
		}
		if it.deadSeq == 0 && slices.Contains(s.Skip, it.m.Subject) {
			w.cur.Seq, w.cur.Attempt, w.cur.NextAt, w.dirty = it.eventSeq, 0, time.Time{}, true
			continue
		}
		if !it.m.Time.IsZero() {
			w.waiting.Store(it.m.Time.UnixNano())
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
		if w.dirty && (w.cur.Attempt > 0 || len(w.sent) >= maxSent || d.now().Sub(w.flushedAt) >= flushEvery) {
			w.flush(ctx, s)
		}
	}
}
