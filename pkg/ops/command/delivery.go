package command

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops/op"
)

// Delivery acts on a subscription's webhook delivery: it redelivers its
// dead letters and moves where it goes on. Safe for concurrent use.
type Delivery struct {
	p DeliveryPorts
}

// DeliveryPorts are what the delivery actions use.
type DeliveryPorts struct {
	// Prefix is the subject prefix; default "agentbus".
	Prefix string
	// Subscriptions is the subscriptions registry.
	Subscriptions interface {
		Get(tenant, id string) (decide.Subscription, bool)
	}
	// Control redelivers and replays (webhook.Control).
	Control interface {
		Waiting(ctx context.Context, tenant, id string) (uint64, error)
		Redeliver(ctx context.Context, tenant, id string) error
		Replay(ctx context.Context, tenant, id string, after uint64) error
	}
	// Events is the event log, bisected to replay from a time.
	Events bus.Log
	// Cursors read and write the cursors of tenants' events
	// (query.Reader).
	Cursors interface {
		Cursor(tenant string, synthetic bool, seq uint64) string
		CursorSeq(tenant string, synthetic bool, cursor string) (uint64, error)
	}
}

// NewDelivery returns the delivery actions on p.
func NewDelivery(p DeliveryPorts) *Delivery {
	if p.Prefix == "" {
		p.Prefix = "agentbus"
	}
	return &Delivery{p: p}
}

// subscription returns the subscription of the request's id, or
// SUBSCRIPTION_NOT_FOUND.
func (d *Delivery) subscription(r *op.Request) (decide.Subscription, error) {
	id := r.Param("id")
	if err := op.CheckID(id); err != nil {
		return decide.Subscription{}, err
	}
	sub, ok := d.p.Subscriptions.Get(r.Tenant, id)
	if !ok {
		return sub, op.SubscriptionNotFound(id)
	}
	return sub, nil
}

// Redeliver is redeliverSubscription.
func (d *Delivery) Redeliver(ctx context.Context, r *op.Request) (*op.Response, error) {
	sub, err := d.subscription(r)
	if err != nil {
		return nil, err
	}
	n, err := d.p.Control.Waiting(ctx, r.Tenant, sub.ID)
	if err != nil {
		return nil, errs.Internal(err)
	}
	if err := d.p.Control.Redeliver(ctx, r.Tenant, sub.ID); err != nil {
		return nil, errs.Internal(err)
	}
	return &op.Response{Outcome: op.Queued, Body: map[string]any{"id": sub.ID, "deadLetters": n}}, nil
}

// Replay is replaySubscription.
func (d *Delivery) Replay(ctx context.Context, r *op.Request) (*op.Response, error) {
	sub, err := d.subscription(r)
	if err != nil {
		return nil, err
	}
	var in struct {
		After json.RawMessage `json:"after"`
		Since *string         `json:"since"`
	}
	_, v, err := bodyObject(r.Body, map[string]bool{"after": true, "since": true}, "after, since")
	if err != nil {
		return nil, err
	}
	v = append(v, envelope.CheckData(r.Body, "$")...)
	if err := json.Unmarshal(r.Body, &in); err != nil {
		v = append(v, errs.Violation{Path: "$", Message: "after must be a cursor or 0, since an RFC 3339 time"})
	}
	if (in.After == nil) == (in.Since == nil) && len(v) == 0 {
		v = append(v, errs.Violation{Path: "$", Message: "give exactly one of after (a cursor, or 0) and since (an RFC 3339 time)"})
	}
	var since time.Time
	if in.Since != nil {
		if since, err = time.Parse(time.RFC3339Nano, *in.Since); err != nil {
			v = append(v, errs.Violation{Path: "$.since", Message: "must be an RFC 3339 time"})
		}
	}
	after := uint64(0)
	if in.After != nil {
		var cursor string
		switch raw := string(in.After); {
		case raw == "0":
			cursor = "0"
		case raw == "null" || json.Unmarshal(in.After, &cursor) != nil || cursor == "":
			cursor = "not a cursor" // null, "", another number or type
		}
		if after, err = d.p.Cursors.CursorSeq(r.Tenant, false, cursor); err != nil {
			v = append(v, errs.Violation{Path: "$.after", Message: "must be 0 (the start) or a cursor of this tenant's events (a delivery record's cursor, a page's next)"})
		}
	}
	if len(v) > 0 {
		return nil, errs.Invalid("the request body is invalid", v)
	}
	if in.After == nil {
		if after, err = d.seqBefore(ctx, since); err != nil {
			return nil, errs.Internal(err)
		}
	}
	if err := d.p.Control.Replay(ctx, r.Tenant, sub.ID, after); err != nil {
		return nil, errs.Internal(err)
	}
	return &op.Response{Outcome: op.Queued, Body: map[string]any{"id": sub.ID, "after": d.p.Cursors.Cursor(r.Tenant, false, after)}}, nil
}

// seqBefore returns the sequence of the last event stored before t (0
// when none is), by bisecting the event log on its stored times.
func (d *Delivery) seqBefore(ctx context.Context, t time.Time) (uint64, error) {
	last, err := d.p.Events.LastSeq(ctx)
	if err != nil {
		return 0, err
	}
	lo, hi := uint64(0), last // invariant: event lo is before t (or lo is 0); events after hi are at or after t
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		m, err := d.firstFrom(ctx, mid, hi)
		if err != nil {
			return 0, err
		}
		if m == nil || !m.Time.Before(t) {
			hi = mid - 1
		} else {
			lo = m.Seq
		}
	}
	return lo, nil
}

// firstFrom returns the first stored event with a sequence in [from, to],
// or nil (sequences may be missing: deleted or aged out).
func (d *Delivery) firstFrom(ctx context.Context, from, to uint64) (*bus.Message, error) {
	msgs, err := d.p.Events.Range(ctx, d.p.Prefix+"."+bus.RootEvents+".>", from, 1)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 || msgs[0].Seq > to {
		return nil, nil
	}
	return msgs[0], nil
}
