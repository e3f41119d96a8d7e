package projection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/settle"
	"github.com/agentbus/agentbus/pkg/text"
)

// Receipt statuses.
const (
	StatusAccepted  = "accepted"
	StatusProcessed = "processed"
	StatusRejected  = "rejected"
)

// Receipt is the correlation index entry of one command: what it was, where
// it is, and the sequences of the events it caused. It is projected from the
// command and event logs and can be rebuilt from them.
type Receipt struct {
	CorrelationID string     `json:"correlationId"`
	Tenant        string     `json:"tenant"`
	Type          string     `json:"type,omitempty"`
	CommandID     string     `json:"commandId,omitempty"`
	Source        string     `json:"source,omitempty"`
	Time          string     `json:"time,omitempty"`
	CommandSeq    uint64     `json:"commandSeq,omitempty"`
	Status        string     `json:"status"`
	Rejection     *Rejection `json:"rejection,omitempty"`
	Events        []uint64   `json:"events,omitempty"`
	UpdatedAt     time.Time  `json:"updatedAt"`
}

// Rejection says why a command was rejected.
type Rejection struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Receipts is the correlation index: a receipt per command, in a KV bucket
// with a TTL, projected from the command and event logs by the durable
// consumers "receipts" (ProjectCommand, ProjectEvent) and read by
// submissions, queries, traces and the processor runtime. Projecting is
// idempotent: a message projected again changes nothing, so the index can
// be rebuilt by replaying the logs into an empty bucket. Safe for
// concurrent use.
type Receipts struct {
	kv             bus.IndexKV
	events         bus.Log
	eventConsumers bus.ConsumerAdmin
	subj           bus.Subjects
	log            *slog.Logger
	now            func() time.Time
	written        writtenCache
	// upTo is the event sequence up to which the receipts consumer was
	// last seen to have projected everything; stuck, in Unix nanoseconds,
	// until when Current does not wait for it.
	upTo  atomic.Uint64
	stuck atomic.Int64
	// history answers for the commands whose receipts the bucket no
	// longer holds; nil: none.
	history *History
}

// NewReceipts returns the index on kv. events and eventConsumers (the
// event log and its consumers) serve Current.
func NewReceipts(kv bus.IndexKV, events bus.Log, eventConsumers bus.ConsumerAdmin, subj bus.Subjects, log *slog.Logger) *Receipts {
	return &Receipts{kv: kv, events: events, eventConsumers: eventConsumers, subj: subj, log: log, now: time.Now}
}

// KV is the bucket the index lives in.
func (x *Receipts) KV() bus.IndexKV { return x.kv }

// Key is the bucket key of a command's receipt.
func Key(tenant, corr string) string { return tenant + "." + corr }

// KeepHistory has Get ask h for a receipt the bucket does not hold (its
// TTL ran out). Call it before the first Get.
func (x *Receipts) KeepHistory(h *History) { x.history = h }

// Get returns the receipt of a command, from the bucket or, past its TTL,
// the history on disk (KeepHistory), or errs.ErrNotFound.
func (x *Receipts) Get(ctx context.Context, tenant, corr string) (*Receipt, error) {
	raw, _, err := x.kv.Get(ctx, Key(tenant, corr))
	if errors.Is(err, errs.ErrNotFound) && x.history != nil {
		return x.history.Get(tenant, corr)
	}
	if err != nil {
		return nil, err
	}
	var r Receipt
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("receipt %s: %w", corr, err)
	}
	return &r, nil
}

// InHistory reports whether the history on disk (KeepHistory) holds a
// receipt of (tenant, corr): whether a command the bucket has no receipt
// of was accepted before. Without a history it reports false.
func (x *Receipts) InHistory(tenant, corr string) (bool, error) {
	if x.history == nil {
		return false, nil
	}
	_, err := x.history.Get(tenant, corr)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// HistoryCurrent reports whether the history on disk (KeepHistory) holds
// the command log up to within maxLag (History.Current); false without a
// history.
func (x *Receipts) HistoryCurrent(maxLag time.Duration) bool {
	return x.history != nil && x.history.Current(maxLag)
}

// Appended tells the history on disk, if any, that the command log holds
// a command at seq (History.Appended).
func (x *Receipts) Appended(seq uint64) {
	if x != nil && x.history != nil {
		x.history.Appended(seq)
	}
}

// update applies change to the receipt of (tenant, corr) with
// compare-and-set, creating it when absent. It starts from what this
// process wrote last for the key (or, for a key it has not written, tries to
// create it blindly), so the usual write costs no read; a stale start only
// costs the conflict, after which it reads and retries.
func (x *Receipts) update(ctx context.Context, tenant, corr string, change func(*Receipt) bool) error {
	key := Key(tenant, corr)
	raw, rev, known := x.written.get(key)
	for tries := 0; ; tries++ {
		if tries >= maxReceiptTries {
			return fmt.Errorf("receipt %s: still conflicting after %d tries", key, tries)
		}
		if tries > 1 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(tries) * 5 * time.Millisecond):
			}
		}
		if !known && tries > 0 {
			var err error
			raw, rev, err = x.kv.Get(ctx, key)
			if errors.Is(err, errs.ErrNotFound) {
				raw, rev = nil, 0
			} else if err != nil {
				return err
			}
		}
		r := Receipt{CorrelationID: corr, Tenant: tenant, Status: StatusAccepted}
		if raw != nil {
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("receipt %s: %w", key, err)
			}
		}
		if !change(&r) {
			return nil // nothing to write: the receipt has it already
		}
		r.UpdatedAt = x.now().UTC()
		val := decide.MustJSON(&r)
		var err error
		if rev == 0 {
			rev, err = x.kv.Create(ctx, key, val)
		} else {
			rev, err = x.kv.Update(ctx, key, val, rev)
		}
		switch {
		case err == nil:
			x.written.put(key, val, rev)
			return nil
		case !errors.Is(err, errs.ErrConflict):
			return err
		}
		known = false
	}
}

// maxReceiptTries bounds the compare-and-set loop; past it the delivery is
// retried later.
const maxReceiptTries = 10

// writtenCache remembers the receipts this process wrote last (value and
// revision), bounded; safe for concurrent use.
type writtenCache struct {
	mu sync.Mutex
	m  map[string]writtenEntry
}

type writtenEntry struct {
	raw []byte
	rev uint64
}

// maxWritten bounds the cache; past it the cache starts over.
const maxWritten = 8192

func (c *writtenCache) get(key string) ([]byte, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	return e.raw, e.rev, ok
}

func (c *writtenCache) put(key string, raw []byte, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxWritten {
		c.m = make(map[string]writtenEntry, maxWritten)
	}
	c.m[key] = writtenEntry{raw: raw, rev: rev}
}

// ProjectCommand records a stored command in its receipt ("accepted"),
// for the command types agentbus does not process itself (whose commands
// may wait long for an agent). Idempotent.
func (x *Receipts) ProjectCommand(ctx context.Context, m *bus.Message) error {
	tenant, corr, change, ok := commandChange(x.subj, m)
	if !ok {
		return nil
	}
	return tooLarge(x.update(ctx, tenant, corr, change))
}

// commandChange returns the change a stored command makes to its
// receipt, and whether it makes one.
func commandChange(subj bus.Subjects, m *bus.Message) (tenant, corr string, change func(*Receipt) bool, ok bool) {
	tenant, typ, ok := subj.ParseCommand(m.Subject)
	env := envelope.ReadLoose(m.Data)
	corr = env.CorrelationID(tenant) // as the processor gives it (decide.ReadEnvelope)
	if !ok || corr == "" {
		return "", "", nil, false
	}
	if _, err := time.Parse(time.RFC3339Nano, env.Time); err != nil || len(env.Time) > maxTimeLen {
		env.Time = "" // the receipt keeps only a time the envelope could have
	}
	return tenant, corr, func(r *Receipt) bool {
		if r.CommandID != "" {
			// Projected already: this message (a redelivery), or another
			// copy (same source and id), which stays the command.
			return false
		}
		// A sequence an event's header gave first is the processor's word
		// (an external one may have none, or a wrong one); the command
		// log's own message is the command.
		r.Type, r.CommandID, r.Source, r.Time, r.CommandSeq = typ, env.ID, env.Source, env.Time, m.Seq
		return true
	}, true
}

// ProjectEvent adds a stored event to its command's receipt. Idempotent.
func (x *Receipts) ProjectEvent(ctx context.Context, m *bus.Message) error {
	tenant, corr, change, ok := eventChange(x.subj, m)
	if !ok {
		return nil
	}
	return tooLarge(x.update(ctx, tenant, corr, change))
}

// eventChange returns the change a stored event makes to its command's
// receipt, and whether it makes one.
func eventChange(subj bus.Subjects, m *bus.Message) (tenant, corr string, change func(*Receipt) bool, ok bool) {
	corr = decide.CorrelationOf(m)
	tenant, _, _, typ, ok := subj.ParseEvent(m.Subject)
	if !ok || corr == "" {
		return "", "", nil, false
	}
	var rej *Rejection
	if typ == decide.TypeCommandRejected {
		var env struct {
			Data Rejection `json:"data"`
		}
		_ = json.Unmarshal(m.Data, &env)
		rej = &Rejection{Code: text.Cut(env.Data.Code, maxRejectionCode), Message: text.Cut(env.Data.Message, MaxRejectionMessage)}
	}
	cmdSeq, _ := strconv.ParseUint(m.Header.Get(bus.HeaderCommandSeq), 10, 64)
	cmdType := m.Header.Get(bus.HeaderCommandType)
	if !envelope.ValidType(cmdType) {
		cmdType = "" // a header from an internal publisher is input like any other
	}
	return tenant, corr, func(r *Receipt) bool {
		i, found := slices.BinarySearch(r.Events, m.Seq)
		if found {
			return false // projected before (a redelivery): all below is there
		}
		if r.CommandSeq == 0 {
			r.CommandSeq = cmdSeq
		}
		if r.Type == "" {
			r.Type = cmdType
		}
		if len(r.Events) < MaxReceiptEvents {
			r.Events = slices.Insert(r.Events, i, m.Seq)
		}
		if rej != nil {
			r.Status, r.Rejection = StatusRejected, rej
		} else if r.Status != StatusRejected {
			r.Status = StatusProcessed
		}
		return true
	}, true
}

// tooLarge marks a receipt the store refuses as too large as a permanent
// failure: retrying cannot help (the receipt bounds what it copies, so
// only a store with a very small maximum payload gets here), and the
// receipt is left as it was.
func tooLarge(err error) error {
	if errors.Is(err, errs.ErrTooLarge) {
		return settle.Permanent(err)
	}
	return err
}

// Policy is how the receipts consumers settle: a failure is retried soon,
// since commands waiting in Current wait for this consumer's ack floor to
// pass the event.
func (x *Receipts) Policy(what string) settle.Policy {
	return settle.Policy{What: what, Log: x.log, Backoff: func(uint64) time.Duration { return time.Second }}
}

// What a receipt copies from messages anyone may publish is bounded, so
// that a receipt stays far below any maximum payload.
const (
	// MaxReceiptEvents bounds the events a receipt lists; GET
	// /events?correlationId= and traces read no further.
	MaxReceiptEvents    = 10_000
	maxRejectionCode    = 64
	MaxRejectionMessage = 2048
	maxTimeLen          = 64
)
