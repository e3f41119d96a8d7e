package natsjs

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/nats-io/nats.go/jetstream"
)

type delivery struct {
	m   jetstream.Msg
	msg bus.Message
	n   uint64
}

func (d *delivery) Message() *bus.Message { return &d.msg }
func (d *delivery) NumDelivered() uint64  { return d.n }
func (d *delivery) Ack(ctx context.Context) error {
	return d.m.Ack()
}
func (d *delivery) Nak(delay time.Duration) error {
	if delay > 0 {
		return d.m.NakWithDelay(delay)
	}
	return d.m.Nak()
}
func (d *delivery) Term(reason string) error { return d.m.TermWithReason(reason) }

// ConsumeOptions tune a consumer loop.
type ConsumeOptions struct {
	// Workers handle deliveries in parallel; deliveries with the same key
	// (see KeyOf) go to the same worker, in order. Default 8.
	Workers int
	// KeyOf picks the ordering key of a message; default its subject.
	KeyOf func(*bus.Message) string
}

// Consume runs handler on every delivery of the durable consumer until ctx
// ends, then waits for in-flight handlers. The handler acks.
func (c *Conn) Consume(ctx context.Context, stream, durable string, opt ConsumeOptions, handler bus.Handler) error {
	cons, err := c.JS.Consumer(ctx, stream, durable)
	if err != nil {
		return fmt.Errorf("consumer %s/%s: %w", stream, durable, err)
	}
	return c.consume(ctx, cons, opt, handler)
}

func (c *Conn) consume(ctx context.Context, cons jetstream.Consumer, opt ConsumeOptions, handler bus.Handler) error {
	workers := opt.Workers
	if workers <= 0 {
		workers = 8
	}
	keyOf := opt.KeyOf
	if keyOf == nil {
		keyOf = func(m *bus.Message) string { return m.Subject }
	}
	// In-flight handlers finish after ctx ends (graceful shutdown).
	hctx := context.WithoutCancel(ctx)
	queues := make([]chan *delivery, workers)
	var wg sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan *delivery, 64)
		wg.Add(1)
		go func(q chan *delivery) {
			defer wg.Done()
			for d := range q {
				handler(hctx, d)
			}
		}(queues[i])
	}
	defer func() { // once consuming has stopped: in-flight handlers finish
		for _, q := range queues {
			close(q)
		}
		wg.Wait()
	}()
	deliver := func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			_ = m.Term()
			return
		}
		d := &delivery{m: m, n: meta.NumDelivered, msg: bus.Message{
			Subject: m.Subject(), Header: bus.Header(m.Headers()), Data: m.Data(),
			Seq: meta.Sequence.Stream, Time: meta.Timestamp,
		}}
		h := fnv.New32a()
		h.Write([]byte(keyOf(&d.msg)))
		select {
		case queues[int(h.Sum32())%workers] <- d:
		case <-ctx.Done():
		}
	}
	name := cons.CachedInfo().Stream + "/" + cons.CachedInfo().Name
	var stops int        // status stops since the last warning
	var warned time.Time // the last warning; one a minute at most
	for {
		cc, err := cons.Consume(deliver, jetstream.PullMaxMessages(256), jetstream.PullExpiry(5*time.Second))
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			cc.Drain()
			<-cc.Closed()
			return nil
		case <-cc.Closed():
		}
		// nats.go stops consuming at a status it takes as final ("409
		// Consumer Deleted", "400 Bad Request") — and it takes a stored
		// message with an empty payload and such a Status header for one,
		// which anyone may publish. So the loop goes on, after a pause,
		// while the consumer exists; the look-alike, never handed over,
		// stays unacked and stops the loop again at each redelivery.
		if stops++; c.log != nil && time.Since(warned) >= time.Minute {
			c.log.Warn("consumer stopped by a status message (a real one, or a stored message with an empty payload and a Status header); consuming again",
				"consumer", name, "stops", stops)
			stops, warned = 0, time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(250 * time.Millisecond):
		}
		// Only a consumer that is really gone, or a connection closed for
		// good, ends the loop; a read without an answer does not.
		err = withRetry(ctx, func(ctx context.Context) error {
			_, err := cons.Info(ctx)
			return err
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, jetstream.ErrConsumerNotFound) || closed(err):
			return fmt.Errorf("consumer %s: %w", name, err)
		}
	}
}
