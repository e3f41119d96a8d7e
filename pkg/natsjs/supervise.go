package natsjs

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
)

// Supervise runs Consume on the durable consumer until ctx ends. When the
// consumer stops (deleted under agentbus, say, or its stream) it calls
// declare — which should declare the streams and consumers again, bounded
// in time — and follows the consumer again, after a pause that grows
// while it keeps stopping (1 s to 30 s, back to 1 s after a minute of
// running). Each stop is logged. It returns when ctx ends.
func (c *Conn) Supervise(ctx context.Context, stream, durable string, opt ConsumeOptions, handler bus.Handler, declare func(context.Context) error, log *slog.Logger) {
	pause := time.Second
	for {
		began := time.Now()
		err := c.Consume(ctx, stream, durable, opt, handler)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > time.Minute {
			pause = time.Second
		}
		log.Error("consumer stopped; declaring it again", "stream", stream, "consumer", durable, "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
		// Bounded, so a server that keeps refusing is said in the log and
		// the consumer tried again, not retried in silence.
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := declare(actx); err != nil && ctx.Err() == nil {
			log.Error("declare streams and consumers", "err", err)
		}
		cancel()
	}
}
