package projection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// currentWait bounds how long Current and CommandsCurrent wait for the
// history, well inside the processor consumer's ack wait (10 s), so the
// wait itself never causes a redelivery.
const (
	currentWait = 3 * time.Second
	// currentRetry: after a wait ran out, the next this long do not wait.
	currentRetry = 10 * time.Second
)

// Current waits, up to a few seconds, until the history holds every event
// stored in the event log when it was called, so a receipt read afterwards
// lists them. It fails when the wait ran out (the history is stuck or far
// behind); for a while after that it fails at once, so one caller pays for
// finding out, not every caller.
func (x *Receipts) Current(ctx context.Context) error {
	if until := x.stuck.Load(); until != 0 && time.Now().UnixNano() < until {
		return errors.New("the correlation index was behind the event log at the last look")
	}
	err := holdsEnd(ctx, x.events, x.history.evts)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		x.stuck.Store(time.Now().Add(currentRetry).UnixNano())
	}
	return err
}

// CommandsCurrent waits, up to a few seconds, until the history holds
// every command stored in the command log when it was called, so that a
// command stored a moment ago, by any replica, is found. It fails with
// errs.ErrUnavailable when the wait ran out.
func (x *Receipts) CommandsCurrent(ctx context.Context) error {
	if err := holdsEnd(ctx, x.history.commands, x.history.cmds); err != nil {
		return fmt.Errorf("%w (%w)", errs.ErrUnavailable, err)
	}
	return nil
}

// holdsEnd waits, up to currentWait, until model reads log up to the last
// message log held when it was called.
func holdsEnd(ctx context.Context, log bus.Log, model *diskModel) error {
	last, err := LastStored(ctx, log)
	if err != nil {
		return fmt.Errorf("the end of the log the %s follows: %w", model.name, err)
	}
	wait, cancel := context.WithTimeout(ctx, currentWait)
	defer cancel()
	return model.waitApplied(wait, last)
}

// Terminal reports whether a receipt records its command's outcome.
func (r *Receipt) Terminal() bool { return r.Status == StatusProcessed || r.Status == StatusRejected }

// Await returns the receipt of (tenant, corr) once it is terminal. When
// ctx ends first it returns the last receipt seen, possibly nil, and ctx's
// error. It polls the history, more often at first.
func (x *Receipts) Await(ctx context.Context, tenant, corr string) (*Receipt, error) {
	var last *Receipt
	for wait := time.Millisecond; ; wait = min(wait*2, 50*time.Millisecond) {
		r, err := x.Get(ctx, tenant, corr)
		switch {
		case err == nil:
			last = r
			if r.Terminal() {
				return r, nil
			}
		case !errors.Is(err, errs.ErrNotFound) && !errors.Is(err, errs.ErrUnavailable) && ctx.Err() == nil:
			return nil, err
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(wait):
		}
	}
}
