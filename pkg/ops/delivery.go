package ops

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// deliveryOperations are the operations on a subscription's delivery.
func (s *Surface) deliveryOperations() []Operation {
	notFound := []errs.Code{errs.CodeSubscriptionNotFound}
	return []Operation{
		{ID: "listDeliveries", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: []Param{idParam},
			Output: "{deliveries: [{subscriptionId, eventId, eventType, cursor, correlationId, status, attempts: [{at, statusCode, latencyMs, error, response}]}]}",
			Errors: notFound,
			Summary: "The deliveries of a subscription's events kept (a week): each attempt's time, status code, latency and error, " +
				"and the first KiB of the answer; status delivered, retrying or failed (dead-lettered).",
			Handle: s.opListDeliveries},
		{ID: "redeliverSubscription", Capability: "events", Scope: ScopeAdmin, Outcomes: []Outcome{Queued}, Params: []Param{idParam},
			Output: "{id, deadLetters}: how many dead letters are delivered again", Errors: notFound,
			Summary: "Deliver a subscription's dead letters again, in order, before its next events (admin scope).",
			Handle:  s.opRedeliver},
		{ID: "replaySubscription", Capability: "events", Scope: ScopeAdmin, Outcomes: []Outcome{Queued}, Params: []Param{idParam},
			Body:   &Body{Description: "{after: a cursor, or 0} or {since: an RFC 3339 time}: where delivery goes on", Schema: replayBodySchema},
			Output: "{id, after}: delivery goes on with the first event after this cursor", Errors: append(notFound, errs.CodeMalformedJSON),
			Summary: "Move a subscription's delivery to an event (its cursor, as a delivery record or GET /events gives it; 0 for the start) or a time, back or forward (admin scope); " +
				"events delivered before are delivered again, each with the webhook-id it had (a receiver that dedupes skips what it kept).",
			Handle: s.opReplay},
	}
}

var replayBodySchema = map[string]any{
	"type": "object", "additionalProperties": false, "maxProperties": 1, "minProperties": 1,
	"properties": map[string]any{
		"after": map[string]any{"type": []string{"string", "integer"}, "maxLength": 64, "minimum": 0, "maximum": 0,
			"description": "the cursor of the event delivery goes on after (a delivery record's cursor, a page's next), or 0 for the start"},
		"since": map[string]any{"type": "string", "format": "date-time", "description": "delivery goes on with the first event stored at or after this time"},
	},
}

// subscription returns the subscription of the request's id, or
// SUBSCRIPTION_NOT_FOUND.
func (s *Surface) subscription(r *Request) (decide.Subscription, error) {
	id := r.Param("id")
	if err := checkID(id); err != nil {
		return decide.Subscription{}, err
	}
	sub, ok := s.p.Registries.Subscriptions.Get(r.Tenant, id)
	if !ok {
		return sub, subscriptionNotFound(id)
	}
	return sub, nil
}

func (s *Surface) opListDeliveries(ctx context.Context, r *Request) (*Response, error) {
	sub, err := s.subscription(r)
	if err != nil {
		return nil, err
	}
	recs, err := s.p.Webhooks.Deliveries.OfSubscription(ctx, r.Tenant, sub.ID)
	if err != nil {
		return nil, errs.Internal(err)
	}
	return &Response{Body: map[string]any{"deliveries": s.reads.DeliveryRecords(r.Tenant, recs)}}, nil
}

func (s *Surface) opRedeliver(ctx context.Context, r *Request) (*Response, error) {
	sub, err := s.subscription(r)
	if err != nil {
		return nil, err
	}
	n, err := s.p.Webhooks.Waiting(ctx, r.Tenant, sub.ID)
	if err != nil {
		return nil, errs.Internal(err)
	}
	if err := s.p.Webhooks.Redeliver(ctx, r.Tenant, sub.ID); err != nil {
		return nil, errs.Internal(err)
	}
	return &Response{Outcome: Queued, Body: map[string]any{"id": sub.ID, "deadLetters": n}}, nil
}

func (s *Surface) opReplay(ctx context.Context, r *Request) (*Response, error) {
	sub, err := s.subscription(r)
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
		if after, err = s.reads.CursorSeq(r.Tenant, false, cursor); err != nil {
			v = append(v, errs.Violation{Path: "$.after", Message: "must be 0 (the start) or a cursor of this tenant's events (a delivery record's cursor, a page's next)"})
		}
	}
	if len(v) > 0 {
		return nil, errs.Invalid("the request body is invalid", v)
	}
	if in.After == nil {
		if after, err = s.seqBefore(ctx, since); err != nil {
			return nil, errs.Internal(err)
		}
	}
	if err := s.p.Webhooks.Replay(ctx, r.Tenant, sub.ID, after); err != nil {
		return nil, errs.Internal(err)
	}
	return &Response{Outcome: Queued, Body: map[string]any{"id": sub.ID, "after": s.reads.Cursor(r.Tenant, false, after)}}, nil
}

// seqBefore returns the sequence of the last event stored before t (0
// when none is), by bisecting the event log on its stored times.
func (s *Surface) seqBefore(ctx context.Context, t time.Time) (uint64, error) {
	last, err := s.p.Events.LastSeq(ctx)
	if err != nil {
		return 0, err
	}
	lo, hi := uint64(0), last // invariant: event lo is before t (or lo is 0); events after hi are at or after t
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		m, err := s.firstFrom(ctx, mid, hi)
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
func (s *Surface) firstFrom(ctx context.Context, from, to uint64) (*bus.Message, error) {
	msgs, err := s.p.Events.Range(ctx, s.subj.Prefix+"."+bus.RootEvents+".>", from, 1)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 || msgs[0].Seq > to {
		return nil, nil
	}
	return msgs[0], nil
}
