package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/webhook/record"
)

// maxCursorTries bounds the compare-and-set loop of an operator's change
// to a cursor racing its worker.
const maxCursorTries = 20

// change applies fn to a subscription's cursor by compare-and-set. A
// cursor not made yet (delivery has not started) is created only with
// create; else change does nothing, as there is nothing to change.
func change(ctx context.Context, state bus.KV, tenant, id string, create bool, fn func(*cursor)) error {
	key := cursorKey(tenant, id)
	for range maxCursorTries {
		raw, rev, err := state.Get(ctx, key)
		var c cursor
		switch {
		case errors.Is(err, errs.ErrNotFound) && !create:
			return nil
		case errors.Is(err, errs.ErrNotFound):
			fn(&c)
			if _, err := state.Create(ctx, key, mustJSON(c)); !errors.Is(err, errs.ErrConflict) {
				return err
			}
			continue
		case err != nil:
			return err
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return fmt.Errorf("cursor %s: %w", key, err)
		}
		fn(&c)
		if _, err := state.Update(ctx, key, mustJSON(c), rev); !errors.Is(err, errs.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("cursor %s: still changing after %d tries", key, maxCursorTries)
}

// Replay moves a subscription's cursor back (or forward) so that delivery
// goes on with the first event after sequence after, at once: the retry
// state of the event it was on is dropped. Events already delivered are
// delivered again, each with the webhook-id it had (its event's id): a
// receiver that dedupes on it skips what it kept, and takes what it lost.
func Replay(ctx context.Context, state bus.KV, tenant, id string, after uint64) error {
	return change(ctx, state, tenant, id, true, func(c *cursor) {
		c.Seq, c.Attempt, c.NextAt = after, 0, time.Time{}
	})
}

// Redeliver asks for the subscription's dead letters not redelivered yet
// to be delivered again, in order, before its next events; each gets the
// whole retry schedule again (and is dead-lettered again if it fails).
// The event the subscription was retrying starts its schedule over after
// them.
func Redeliver(ctx context.Context, state bus.KV, dead bus.Log, prefix, tenant, id string) error {
	last, err := dead.Last(ctx, deadSubject(prefix, tenant, id))
	if errors.Is(err, errs.ErrNotFound) {
		return nil // none
	}
	if err != nil {
		return err
	}
	return change(ctx, state, tenant, id, false, func(c *cursor) {
		if last.Seq > c.Redeliver {
			c.Redeliver = last.Seq
			c.Attempt, c.NextAt = 0, time.Time{}
		}
	})
}

// Enable lets delivery go on after the receiver answered 410 Gone, from
// the event it refused, at once.
func Enable(ctx context.Context, state bus.KV, tenant, id string) error {
	return change(ctx, state, tenant, id, false, func(c *cursor) {
		c.Gone, c.Attempt, c.NextAt = false, 0, time.Time{}
	})
}

// Control is what operators and traces do with delivery: replay a
// subscription, redeliver its dead letters, let it go on after a 410, read
// the records. Safe for concurrent use.
type Control struct {
	Prefix      string // subject prefix; "agentbus" when empty
	State       bus.KV
	DeadLetters bus.Log
	Deliveries  *record.Deliveries
}

func (c *Control) prefix() string {
	if c.Prefix == "" {
		return "agentbus"
	}
	return c.Prefix
}

// Replay: see the package function Replay.
func (c *Control) Replay(ctx context.Context, tenant, id string, after uint64) error {
	return Replay(ctx, c.State, tenant, id, after)
}

// Redeliver: see the package function Redeliver.
func (c *Control) Redeliver(ctx context.Context, tenant, id string) error {
	return Redeliver(ctx, c.State, c.DeadLetters, c.prefix(), tenant, id)
}

// Enable: see the package function Enable.
func (c *Control) Enable(ctx context.Context, tenant, id string) error {
	return Enable(ctx, c.State, tenant, id)
}

// maxWaiting bounds the dead letters Waiting counts.
const maxWaiting = 1000

// Waiting counts a subscription's dead letters still kept and not
// redelivered yet, up to maxWaiting (a bound: some may have aged out of
// the log).
func (c *Control) Waiting(ctx context.Context, tenant, id string) (uint64, error) {
	raw, _, err := c.State.Get(ctx, cursorKey(tenant, id))
	var cur cursor
	switch {
	case errors.Is(err, errs.ErrNotFound):
	case err != nil:
		return 0, err
	default:
		if err := json.Unmarshal(raw, &cur); err != nil {
			return 0, err
		}
	}
	// A read stops at bus.RangeBytes of payload too: large dead letters
	// take several.
	subject, from, n := deadSubject(c.prefix(), tenant, id), max(cur.Redelivered, cur.Redeliver)+1, 0
	for n < maxWaiting {
		want := maxWaiting - n
		msgs, err := c.DeadLetters.Range(ctx, subject, from, want)
		if err != nil {
			return 0, err
		}
		n += len(msgs)
		if !bus.Full(msgs, want) {
			break
		}
		from = msgs[len(msgs)-1].Seq + 1
	}
	return uint64(n), nil
}
