package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

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
// compare-and-set, creating it when absent.
func (a *App) updateReceipt(ctx context.Context, tenant, corr string, change func(*Receipt)) error {
	key := receiptKey(tenant, corr)
	for {
		raw, rev, err := a.p.Receipts.Get(ctx, key)
		r := Receipt{CorrelationID: corr, Tenant: tenant, Status: StatusAccepted}
		switch {
		case errors.Is(err, errs.ErrNotFound):
			rev = 0
		case err != nil:
			return err
		default:
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("receipt %s: %w", key, err)
			}
		}
		change(&r)
		r.UpdatedAt = a.now().UTC()
		val := mustJSON(&r)
		if rev == 0 {
			_, err = a.p.Receipts.Create(ctx, key, val)
		} else {
			_, err = a.p.Receipts.Update(ctx, key, val, rev)
		}
		if !errors.Is(err, errs.ErrConflict) {
			return err
		}
	}
}

// ProjectCommand records a stored command in its receipt ("accepted").
func (a *App) ProjectCommand(ctx context.Context, d bus.Delivery) {
	m := d.Message()
	tenant, typ, ok := a.subj.ParseCommand(m.Subject)
	corr := m.Header.Get(bus.HeaderCorrelationID)
	var env struct {
		ID, Source, Time string
	}
	_ = json.Unmarshal(m.Data, &env)
	if corr == "" && env.Source != "" && env.ID != "" {
		corr = envelope.CorrelationID(tenant, env.Source, env.ID)
	}
	if !ok || corr == "" {
		_ = d.Ack(ctx)
		return
	}
	err := a.updateReceipt(ctx, tenant, corr, func(r *Receipt) {
		r.Type, r.CommandID, r.Source, r.Time, r.CommandSeq = typ, env.ID, env.Source, env.Time, m.Seq
	})
	a.settle(ctx, d, err, "project command receipt")
}

// ProjectEvent adds a stored event to its command's receipt.
func (a *App) ProjectEvent(ctx context.Context, d bus.Delivery) {
	m := d.Message()
	corr := m.Header.Get(bus.HeaderCorrelationID)
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
		rej = &env.Data
	}
	err := a.updateReceipt(ctx, tenant, corr, func(r *Receipt) {
		if i, found := slices.BinarySearch(r.Events, m.Seq); !found {
			r.Events = slices.Insert(r.Events, i, m.Seq)
		}
		if rej != nil {
			r.Status, r.Rejection = StatusRejected, rej
		} else if r.Status != StatusRejected {
			r.Status = StatusProcessed
		}
	})
	a.settle(ctx, d, err, "project event receipt")
}

func (a *App) settle(ctx context.Context, d bus.Delivery, err error, what string) {
	if err != nil {
		a.log.Warn(what+" failed; will retry", "err", err, "subject", d.Message().Subject)
		_ = d.Nak(time.Second)
		return
	}
	_ = d.Ack(ctx)
}

// CorrelationKey orders deliveries by correlation id: messages of one
// command are handled in order, different commands in parallel.
func CorrelationKey(m *bus.Message) string {
	if c := m.Header.Get(bus.HeaderCorrelationID); c != "" {
		return c
	}
	return m.Subject
}
