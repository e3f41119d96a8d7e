package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
)

// cursorKey is the key of a subscription's cursor in the state bucket:
// written by the worker that holds its lease (flush), and by an operator's
// replay, redelivery or enable (change), each by compare-and-set.
func cursorKey(tenant, id string) string { return "cursor." + tenant + "." + id }

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

// flushEvery is how long a moved cursor may wait in memory before it is
// written; maxSent how many delivery records a worker has in flight
// before flush waits for them.
const (
	flushEvery = 100 * time.Millisecond
	maxSent    = 512
)

// loadCursor reads the subscription's cursor, creating it at its start.
func (w *worker) loadCursor(ctx context.Context, s *Subscription) (cursor, uint64, error) {
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
			return w.loadCursor(ctx, s)
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
		w.rev, w.dirty, w.flushedAt = rev, false, w.d.now()
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
	if !w.d.p.Deliveries.Stored(ctx, w.sent) {
		return false
	}
	clear(w.sent)
	w.sent = w.sent[:0]
	return true
}
