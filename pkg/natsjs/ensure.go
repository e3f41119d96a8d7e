package natsjs

import (
	"context"
	"time"
)

// EnsureConsumer creates or updates a durable pull consumer on stream with
// the given filter subjects (explicit ack; none takes every message), and
// returns once the consumer filters on them.
func (c *Conn) EnsureConsumer(ctx context.Context, stream, durable string, filters []string, ackWait time.Duration, maxDeliver int) error {
	return c.applyConsumer(ctx, Spec{
		Kind: "consumer", Stream: stream, Name: durable, FilterSubjects: filters,
		AckWait: duration(ackWait), MaxDeliver: maxDeliver, MaxAckPending: 4096,
	})
}
