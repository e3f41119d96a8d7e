package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
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

// Receipt returns the receipt of a command, or errs.ErrNotFound.
func (a *App) Receipt(ctx context.Context, tenant, corr string) (*Receipt, error) {
	raw, _, err := a.p.Receipts.Get(ctx, receiptKey(tenant, corr))
	if err != nil {
		return nil, err
	}
	var r Receipt
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("receipt %s: %w", corr, err)
	}
	return &r, nil
}

// updateReceipt applies change to the receipt of (tenant, corr) with
// compare-and-set, creating it when absent. It starts from what this
// process wrote last for the key (or, for a key it has not written, tries to
// create it blindly), so the usual write costs no read; a stale start only
// costs the conflict, after which it reads and retries.
func (a *App) updateReceipt(ctx context.Context, tenant, corr string, change func(*Receipt) bool) error {
	key := receiptKey(tenant, corr)
	raw, rev, known := a.written.get(key)
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
			raw, rev, err = a.p.Receipts.Get(ctx, key)
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
		r.UpdatedAt = a.now().UTC()
		val := mustJSON(&r)
		var err error
		if rev == 0 {
			rev, err = a.p.Receipts.Create(ctx, key, val)
		} else {
			rev, err = a.p.Receipts.Update(ctx, key, val, rev)
		}
		switch {
		case err == nil:
			a.written.put(key, val, rev)
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

// ProjectCommand records a stored command in its receipt ("accepted").
func (a *App) ProjectCommand(ctx context.Context, d bus.Delivery) {
	m := d.Message()
	tenant, typ, ok := a.subj.ParseCommand(m.Subject)
	env := readLoose(m.Data)
	corr := env.correlationID(tenant) // as the processor gives it (readEnvelope)
	if !ok || corr == "" {
		_ = d.Ack(ctx)
		return
	}
	if _, err := time.Parse(time.RFC3339Nano, env.Time); err != nil || len(env.Time) > maxTimeLen {
		env.Time = "" // the receipt keeps only a time the envelope could have
	}
	err := a.updateReceipt(ctx, tenant, corr, func(r *Receipt) bool {
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
	})
	a.settle(ctx, d, err, "project command receipt")
}

// ProjectEvent adds a stored event to its command's receipt.
func (a *App) ProjectEvent(ctx context.Context, d bus.Delivery) {
	m := d.Message()
	corr := correlationOf(m)
	tenant, _, _, typ, ok := a.subj.ParseEvent(m.Subject)
	if !ok || corr == "" {
		_ = d.Ack(ctx)
		return
	}
	var rej *Rejection
	if typ == TypeCommandRejected {
		var env struct {
			Data Rejection `json:"data"`
		}
		_ = json.Unmarshal(m.Data, &env)
		rej = &Rejection{Code: truncate(env.Data.Code, maxRejectionCode), Message: truncate(env.Data.Message, maxRejectionMessage)}
	}
	cmdSeq, _ := strconv.ParseUint(m.Header.Get(bus.HeaderCommandSeq), 10, 64)
	cmdType := m.Header.Get(bus.HeaderCommandType)
	if !envelope.ValidType(cmdType) {
		cmdType = "" // a header from an internal publisher is input like any other
	}
	err := a.updateReceipt(ctx, tenant, corr, func(r *Receipt) bool {
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
	})
	a.settle(ctx, d, err, "project event receipt")
}

func (a *App) settle(ctx context.Context, d bus.Delivery, err error, what string) {
	switch {
	case errors.Is(err, errs.ErrTooLarge):
		// Retrying cannot help (the receipt bounds what it copies, so only
		// a store with a very small maximum payload gets here).
		a.log.Error(what+" failed for good; the receipt is left as it was", "err", err, "subject", d.Message().Subject, "seq", d.Message().Seq)
		_ = d.Ack(ctx)
	case err != nil:
		a.log.Warn(what+" failed; will retry", "err", err, "subject", d.Message().Subject)
		// Soon: commands waiting in processedBefore wait for this
		// consumer's ack floor to pass the event.
		_ = d.Nak(time.Second)
	default:
		_ = d.Ack(ctx)
	}
}

// What a receipt copies from messages anyone may publish is bounded, so
// that a receipt stays far below any maximum payload.
const (
	// MaxReceiptEvents bounds the events a receipt lists; GET
	// /events?correlationId= and traces read no further.
	MaxReceiptEvents    = 10_000
	maxRejectionCode    = 64
	maxRejectionMessage = 2048
	maxTimeLen          = 64
)

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// correlationOf returns a message's correlation header when it is a valid
// id (as agentbus writes it), else "": a header from an internal publisher
// is input like any other.
func correlationOf(m *bus.Message) string {
	if c := m.Header.Get(bus.HeaderCorrelationID); envelope.ValidTokenID(c) {
		return c
	}
	return ""
}

// CorrelationKey orders deliveries by correlation id: messages of one
// command are handled in order, different commands in parallel.
func CorrelationKey(m *bus.Message) string {
	if c := m.Header.Get(bus.HeaderCorrelationID); c != "" {
		return c
	}
	return m.Subject
}
