// Package bus declares the messaging ports agentbus's core uses and the
// message type they carry. It imports nothing of NATS; pkg/natsjs
// implements the ports on JetStream.
package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"time"
)

// Header names agentbus writes on commands and events: the public NATS
// contract documented in the README.
const (
	HeaderMsgID         = "Nats-Msg-Id"
	HeaderCorrelationID = "Agentbus-Correlation-Id"
	HeaderCausationID   = "Agentbus-Causation-Id"
	HeaderSchema        = "Agentbus-Schema"
	HeaderTenant        = "Agentbus-Tenant"
	HeaderCommandType   = "Agentbus-Command-Type"
	HeaderCommandSeq    = "Agentbus-Command-Seq"
	HeaderSynthetic     = "Agentbus-Synthetic"
	// HeaderAggregateID is the aggregate id of an event on an aggregate
	// (its subject carries the aggregate's shard: Subjects).
	HeaderAggregateID = "Agentbus-Aggregate-Id"
)

// Header is a message's header set (canonical names as above).
type Header map[string][]string

// Get returns the first value of key, or "".
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces key's values with v.
func (h Header) Set(key, v string) { h[key] = []string{v} }

// Message is one stored or to-be-stored message.
type Message struct {
	Subject string
	Header  Header
	Data    []byte
	Seq     uint64    // stream sequence; 0 before storing
	Time    time.Time // stored time; zero before storing
}

// Delivery is a message handed to a consumer handler. The handler must end
// it exactly once with Ack, Nak or Term.
type Delivery interface {
	Message() *Message
	// NumDelivered counts deliveries of this message, from 1.
	NumDelivered() uint64
	// Ack, Nak (redeliver after delay) and Term (never again, for reason)
	// settle the delivery. It is settled once: after one of them
	// succeeded, the others fail.
	Ack(ctx context.Context) error
	Nak(delay time.Duration) error
	Term(reason string) error
}

// Handler handles one delivery. It is called from several goroutines.
type Handler func(ctx context.Context, d Delivery)

// Expect is an optimistic-concurrency expectation: the last message on
// Subject (a wildcard filter) must have stream sequence LastSeq (0 = none).
type Expect struct {
	Subject string
	LastSeq uint64
}

// Log is one append-only stream read and written by sequence.
type Log interface {
	// Append stores msgs atomically (all or none). With expect set the
	// append fails with errs.ErrConflict when the expectation does not hold;
	// it fails with errs.ErrDuplicate when a message id was stored before.
	// It returns the sequence of the last stored message. The messages
	// belong to Append until it returns: it may write transport headers
	// into their Header maps, and they stay there. An attempt without an
	// answer is retried when every message carries HeaderMsgID; otherwise
	// only when no stream answered at all (nothing can have been stored).
	Append(ctx context.Context, msgs []*Message, expect *Expect) (uint64, error)
	// Last returns the last message matching filter, or errs.ErrNotFound.
	Last(ctx context.Context, filter string) (*Message, error)
	// Get returns the message at seq, or errs.ErrNotFound.
	Get(ctx context.Context, seq uint64) (*Message, error)
	// Range returns up to max messages matching filter with sequence >= from,
	// in stream order. It also stops at the message whose payload takes
	// those before it to RangeBytes or more (see Full), so one read holds
	// about that much whatever the size of the messages. An empty result
	// means nothing more is stored now.
	Range(ctx context.Context, filter string, from uint64, max int) ([]*Message, error)
	// LastSeq returns the stream's last sequence.
	LastSeq(ctx context.Context) (uint64, error)
	// Follow starts calling fn with every message matching filter (one
	// subject, wildcards allowed) from sequence from on, in stream order,
	// from one goroutine, and returns. It keeps following, recovering from
	// failed reads and broker disconnects without skipping a message, until
	// ctx ends.
	Follow(ctx context.Context, filter string, from uint64, fn func(*Message))
}

// KV is a key-value bucket with compare-and-set.
type KV interface {
	// Get returns the value and revision of key, or errs.ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	// Create stores key only if absent, else errs.ErrConflict.
	Create(ctx context.Context, key string, val []byte) (uint64, error)
	// Update stores key only if its revision is rev, else errs.ErrConflict.
	Update(ctx context.Context, key string, val []byte, rev uint64) (uint64, error)
	// Put stores key unconditionally.
	Put(ctx context.Context, key string, val []byte) (uint64, error)
	// Delete removes key.
	Delete(ctx context.Context, key string) error
}

// AsyncKV is a KV that can also send puts without waiting for each to be
// stored: a writer of many independent values (webhook delivery records)
// keeps them in flight together instead of one round trip each.
type AsyncKV interface {
	KV
	// PutAsync sends an unconditional put of key (as Put) and returns
	// without waiting for the store's answer; an error means nothing was
	// sent. Puts sent by one goroutine are stored in the order sent (a
	// later put of a key wins), and after any put it sends before.
	// Whether the put is stored is known only from Wait.
	PutAsync(key string, val []byte) (PendingPut, error)
}

// PendingPut is a put sent by AsyncKV.PutAsync.
type PendingPut interface {
	// Wait returns once the put's fate is known: its revision when
	// stored, or an error — errs.ErrUnavailable when no answer came
	// within the store's own bound, after which it may or may not have
	// been stored. A ctx that ends first returns ctx's error; the put
	// goes on. Safe to call more than once, from any goroutine.
	Wait(ctx context.Context) (uint64, error)
}

// RangeBytes is about the most payload one Range returns: a read of
// large messages ends early (after at least one message) rather than
// holding up to max of them at once.
const RangeBytes = 4 << 20

// Full reports whether a Range of at most max messages returned msgs
// because it reached a bound (max messages or RangeBytes) rather than the
// end of the matches: more may follow its last message.
func Full(msgs []*Message, max int) bool {
	return len(msgs) >= max || PayloadBytes(msgs) >= RangeBytes
}

// JSONObject reports whether data is a JSON object, as every envelope is:
// what a read can serve of a stored event (any NATS publisher can store
// anything on an event subject).
func JSONObject(data []byte) bool {
	d := bytes.TrimLeft(data, " \t\r\n")
	return len(d) > 0 && d[0] == '{' && json.Valid(d)
}

// PayloadBytes is the size of msgs' payloads.
func PayloadBytes(msgs []*Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Data)
	}
	return n
}

// Broadcast is publish and subscribe without a stream (core NATS): a
// message reaches those subscribed at the moment it is sent, and is lost
// when none is, or when the connection is down. Safe for concurrent use.
type Broadcast interface {
	// Publish sends data on subject without waiting for anyone. It fails
	// with errs.ErrUnavailable, having sent nothing, when not connected:
	// nothing is queued for a later connection.
	Publish(subject string, data []byte) error
	// Subscribe calls fn with the payload of every message on subject
	// from now on, from one goroutine, until ctx ends. fn owns data.
	Subscribe(ctx context.Context, subject string, fn func(data []byte)) error
}
