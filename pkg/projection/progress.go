package projection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// currentWait bounds how long Current waits for the receipts consumer,
// well inside the processor consumer's ack wait (10 s), so the wait itself
// never causes a redelivery; currentPoll is how often it looks.
const (
	currentWait = 3 * time.Second
	currentPoll = 20 * time.Millisecond
	// currentRetry: after a wait ran out, the next this long do not wait.
	currentRetry = 10 * time.Second
)

// Current waits, up to a few seconds, until the receipts consumer has
// projected every event stored in the event log when it was called, so a
// receipt read afterwards lists them. It fails when the wait ran out (the
// projection is stuck or far behind); for a while after that it fails at
// once, so one caller pays for finding out, not every caller.
func (x *Receipts) Current(ctx context.Context) error {
	if until := x.stuck.Load(); until != 0 && time.Now().UnixNano() < until {
		return errors.New("the receipts consumer was behind at the last look")
	}
	last, err := x.events.LastSeq(ctx)
	if err != nil {
		return err
	}
	if x.upTo.Load() >= last {
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, currentWait)
	defer cancel()
	for {
		st, err := x.eventConsumers.Consumer(wait, bus.ReceiptsConsumer)
		if err == nil && st.AckFloor >= last {
			for seen := x.upTo.Load(); st.AckFloor > seen && !x.upTo.CompareAndSwap(seen, st.AckFloor); seen = x.upTo.Load() {
			}
			return nil
		}
		select {
		case <-wait.Done():
			x.stuck.Store(time.Now().Add(currentRetry).UnixNano())
			if err == nil {
				err = fmt.Errorf("receipts projected up to event %d of %d", st.AckFloor, last)
			}
			return err
		case <-time.After(currentPoll):
		}
	}
}

// Terminal reports whether a receipt records its command's outcome.
func (r *Receipt) Terminal() bool { return r.Status == StatusProcessed || r.Status == StatusRejected }

// Await returns the receipt of (tenant, corr) once it is terminal. When
// ctx ends first it returns the last receipt seen, possibly nil, and ctx's
// error. It watches the receipt's key when the bucket can, and polls
// otherwise.
func (x *Receipts) Await(ctx context.Context, tenant, corr string) (*Receipt, error) {
	var last atomic.Pointer[Receipt]
	if w, ok := x.kv.(bus.KVWatcher); ok {
		done := make(chan *Receipt, 1)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err := w.Watch(wctx, Key(tenant, corr), func(c bus.KVChange) {
			var r Receipt
			if c.Deleted || json.Unmarshal(c.Value, &r) != nil {
				return
			}
			last.Store(&r)
			if r.Terminal() {
				select {
				case done <- &r:
				default:
				}
			}
		})
		if err == nil {
			select {
			case r := <-done:
				return r, nil
			case <-ctx.Done():
				return last.Load(), ctx.Err()
			}
		}
		if ctx.Err() != nil {
			return last.Load(), ctx.Err()
		}
		x.log.Warn("receipt watch failed; polling", "correlationId", corr, "err", err)
	}
	for wait := 2 * time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
		r, err := x.Get(ctx, tenant, corr)
		switch {
		case err == nil:
			last.Store(r)
			if r.Terminal() {
				return r, nil
			}
		case !errors.Is(err, errs.ErrNotFound) && ctx.Err() == nil:
			return nil, err
		}
		select {
		case <-ctx.Done():
			return last.Load(), ctx.Err()
		case <-time.After(wait):
		}
	}
}
