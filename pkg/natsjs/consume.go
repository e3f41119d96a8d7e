package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// delivery is one message of a durable consumer, settled through nats.go's
// *Msg methods, once (bus.Delivery).
type delivery struct {
	m       *nats.Msg
	msg     bus.Message
	n       uint64
	settled atomic.Bool
}

func (d *delivery) Message() *bus.Message { return &d.msg }
func (d *delivery) NumDelivered() uint64  { return d.n }
func (d *delivery) Ack(ctx context.Context) error {
	return d.settle(func() error { return d.m.Ack() })
}
func (d *delivery) Nak(delay time.Duration) error {
	return d.settle(func() error { return d.m.NakWithDelay(delay) })
}

// Term ends the message's deliveries. nats.go's Msg.Term cannot carry a
// reason, which the server puts in its termination advisory, so the
// protocol's "+TERM <reason>" is sent here.
func (d *delivery) Term(reason string) error {
	return d.settle(func() error { return d.m.Respond([]byte("+TERM " + reason)) })
}

// settle sends one settlement unless one was sent already.
func (d *delivery) settle(send func() error) error {
	if d.settled.Load() {
		return nats.ErrMsgAlreadyAckd
	}
	if err := send(); err != nil {
		return err
	}
	d.settled.Store(true)
	return nil
}

// ConsumeOptions tune a consumer loop.
type ConsumeOptions struct {
	// Workers handle deliveries in parallel; the deliveries of one key
	// (see KeyOf) are handled one at a time, in order, by whichever
	// worker is free. Default 8.
	Workers int
	// KeyOf picks the ordering key of a message; default its subject.
	KeyOf func(*bus.Message) string
}

// heldPerWorker bounds the deliveries Consume holds, handled or waiting:
// this many a worker. Past it the pull loop waits, and the server holds
// the rest.
const heldPerWorker = 64

// ErrConsumerDeleted is what Consume returns, wrapped, when its consumer
// or the consumer's stream is deleted while it consumes.
var ErrConsumerDeleted = errors.New("consumer deleted")

// Consume runs handler on every delivery of the durable consumer until ctx
// ends, then waits for in-flight handlers, and returns nil. The handler
// acks. It returns an error wrapping ErrConsumerDeleted when the consumer
// is deleted while it runs; a consumer missing at the start is another
// error.
func (c *Conn) Consume(ctx context.Context, stream, durable string, opt ConsumeOptions, handler bus.Handler) error {
	if _, err := c.JS.Consumer(ctx, stream, durable); err != nil {
		return fmt.Errorf("consumer %s/%s: %w", stream, durable, err)
	}
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
	work := newKeyedWork(workers, workers*heldPerWorker, func(d *delivery) { handler(hctx, d) })
	defer work.close() // once consuming has stopped: what is held is handled
	deliver := func(m *nats.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			_ = c.NC.Publish(m.Reply, []byte("+TERM not a JetStream delivery"))
			return
		}
		d := &delivery{m: m, n: meta.NumDelivered, msg: bus.Message{
			Subject: m.Subject, Header: bus.Header(m.Header), Data: m.Data,
			Seq: meta.Sequence.Stream, Time: meta.Timestamp,
		}}
		work.give(keyOf(&d.msg), d, ctx.Done())
	}
	return c.pull(ctx, stream, durable, deliver)
}

// A pull request asks for pullBatch messages and expires after pullExpiry.
// The loop keeps one current request and sends the next when it is filled
// or ends, at once after a reconnect (a restarted server has forgotten it),
// or after pullSilence without a word (it was lost on the way).
const (
	pullBatch   = 256
	pullExpiry  = 2 * time.Second
	pullSilence = pullExpiry + time.Second
)

// pull runs the JetStream pull protocol for the durable consumer
// stream/durable and calls deliver with every message until ctx ends.
// agentbus speaks it itself rather than through nats.go's Consume: a
// delivered message has a reply subject ($JS.ACK…) and a server status
// has none, but nats.go tells them apart by an empty payload and a Status
// header, so a stored message made to look like "409 Consumer Deleted"
// stopped the consumer, and one made to look like a heartbeat, never
// handed over nor acked, held a consumer with max_ack_pending 1 for good.
// Here every message with a reply is a delivery, whatever its headers.
//
// Each request has a reply subject of its own (inbox.<n>), on which its
// statuses arrive, so only the current request's end leads to the next: an
// earlier one the server still holds — asked again after a reconnect the
// server had not in fact forgotten, or sent from nats.go's reconnect
// buffer — just expires. Deliveries carry their stream subject, not the
// request's, and all count towards the current request, which at worst
// makes the next one go out a little early.
func (c *Conn) pull(ctx context.Context, stream, durable string, deliver func(*nats.Msg)) error {
	inbox := c.NC.NewInbox()
	// Room for the current request and two earlier ones still open.
	msgs := make(chan *nats.Msg, 3*pullBatch)
	sub, err := c.NC.ChanSubscribe(inbox+".*", msgs)
	if err != nil {
		return fmt.Errorf("consumer %s/%s: %w", stream, durable, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	next := "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + durable
	req := fmt.Appendf(nil, `{"batch":%d,"expires":%d}`, pullBatch, pullExpiry.Nanoseconds())
	var (
		asked   int    // requests sent
		current string // the reply subject of the current request
		got     int    // deliveries since it was sent
	)
	ask := func() {
		asked++
		current, got = inbox+"."+strconv.Itoa(asked), 0
		_ = c.NC.PublishRequest(next, current, req) // lost: the timer asks again
	}
	silence := c.pullSilence
	if silence == 0 {
		silence = pullSilence
	}
	reconnected := c.NC.StatusChanged(nats.CONNECTED) // sent at every reconnect
	defer c.NC.RemoveStatusListener(reconnected)
	ask()
	timer := time.NewTimer(silence)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reconnected: // a restarted server has forgotten the request
			ask()
		case <-timer.C: // no word within the request's life: it was lost
			ask()
		case m := <-msgs:
			if m.Reply != "" {
				deliver(m)
				if got++; got == pullBatch {
					ask()
				}
				break
			}
			if m.Subject != current {
				break // the end of an earlier request
			}
			// A status ends the request. It expired (408), the consumer
			// changed leader or its server is shutting down (409): ask again
			// at once (and once more at the reconnect). Anything else — no
			// responders (503), not found (404), a limit of the consumer's
			// (409 Exceeded …), a bad request — is said, and asked again
			// after a pause unless the consumer or its stream is gone.
			status, desc := lastHeader(m.Header, "Status"), lastHeader(m.Header, "Description")
			switch lower := strings.ToLower(desc); {
			case status == "409" && strings.Contains(lower, "consumer deleted"):
				return fmt.Errorf("consumer %s/%s: %w", stream, durable, ErrConsumerDeleted)
			case status == "408" || status == "409" && (strings.Contains(lower, "leadership change") || strings.Contains(lower, "server shutdown")):
			default:
				_, err := c.JS.Consumer(ctx, stream, durable)
				if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
					return fmt.Errorf("consumer %s/%s: %w: %w", stream, durable, ErrConsumerDeleted, err)
				}
				c.log.Warn("pull request refused; asking again shortly", "stream", stream, "consumer", durable, "status", status, "description", desc)
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
				}
			}
			ask()
		}
		timer.Reset(silence) // no stale tick to drain since Go 1.23
	}
}
