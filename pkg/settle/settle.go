// Package settle is agentbus's one settlement policy for consumer
// handlers: a handler says what happened by its error, and Wrap turns that
// into ack, nak with backoff, term, or a terminal outcome after the last
// attempt. Handlers never ack, nak or term themselves.
package settle

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// Handler handles one delivered message; delivery counts its deliveries
// from 1. nil: done (acked). Any other error is settled by the Policy.
type Handler func(ctx context.Context, m *bus.Message, delivery uint64) error

// Policy says how Wrap settles a handler's outcome. The zero Policy naks
// every failure after a second, for ever.
type Policy struct {
	// What the handler does, for log lines ("process command").
	What string
	Log  *slog.Logger
	// Backoff is the delay of the nak after the given failed delivery;
	// default one second.
	Backoff func(delivery uint64) time.Duration
	// Attempts bounds the deliveries of one message (0: unbounded). When
	// the last fails, Exhausted runs; a failure that Endless accepts is
	// retried whatever the count.
	Attempts  uint64
	Exhausted func(ctx context.Context, m *bus.Message, delivery uint64, err error) error
	Endless   func(err error) bool
	// Alarm, when set, says which failures are logged as errors; the
	// others are warnings (expected, and retried).
	Alarm func(err error, delivery uint64) bool
}

// permanent marks an error no retry can fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks err as one no retry can fix: Wrap logs it and acks the
// message, leaving its effect undone. nil stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// Wrap returns the bus.Handler that runs h and settles each delivery once:
//   - nil: ack (a failed ack is logged; the message comes again);
//   - a Permanent error: logged as an error, ack;
//   - a failure of the last of Attempts deliveries (unless Endless): the
//     Exhausted outcome, then ack; when Exhausted fails, or is nil, term
//     when nil, nak when it failed;
//   - any other failure: logged, nak after Backoff.
func Wrap(p Policy, h Handler) bus.Handler {
	if p.Log == nil {
		p.Log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, d bus.Delivery) {
		m, n := d.Message(), d.NumDelivered()
		err := h(ctx, m, n)
		log := func() *slog.Logger { // built only when there is something to say
			l := p.Log.With("subject", m.Subject, "seq", m.Seq, "delivery", n)
			if c := m.Header.Get(bus.HeaderCorrelationID); c != "" {
				l = l.With("correlationId", c)
			}
			if id := tracing.TraceID(m.Header); id != "" {
				l = l.With("traceId", id)
			}
			return l
		}
		var perm permanent
		switch {
		case err == nil:
			if aerr := d.Ack(ctx); aerr != nil {
				log().Warn(p.What+": ack failed; the message will be redelivered", "err", aerr)
			}
			return
		case errors.As(err, &perm):
			log().Error(p.What+" failed for good; message dropped", "err", err)
			_ = d.Ack(ctx)
			return
		case p.Attempts > 0 && n >= p.Attempts && (p.Endless == nil || !p.Endless(err)):
			if p.Exhausted == nil {
				log().Error(p.What+" failed for good; giving up on this message", "err", err)
				_ = d.Term(err.Error())
				return
			}
			log().Error(p.What+" failed for good; settling the message with its terminal outcome", "err", err)
			xerr := p.Exhausted(ctx, m, n, err)
			if xerr == nil {
				_ = d.Ack(ctx)
				return
			}
			err = xerr
		}
		level := slog.LevelWarn
		if p.Alarm != nil && p.Alarm(err, n) {
			level = slog.LevelError
		}
		log().Log(ctx, level, p.What+" failed; will retry", "err", err)
		delay := time.Second
		if p.Backoff != nil {
			delay = p.Backoff(n)
		}
		_ = d.Nak(delay)
	}
}

// Linear is a backoff of step per failed delivery, at most max.
func Linear(step, max time.Duration) func(uint64) time.Duration {
	return func(n uint64) time.Duration { return min(time.Duration(n)*step, max) }
}

// Func adapts a handler that does not care how often its message came.
func Func(f func(ctx context.Context, m *bus.Message) error) Handler {
	return func(ctx context.Context, m *bus.Message, _ uint64) error { return f(ctx, m) }
}
