package ops

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// deliveryOperations are the operations on a subscription's delivery.
func (s *Surface) deliveryOperations() []Operation {
	notFound := []errs.Code{errs.CodeSubscriptionNotFound}
	return []Operation{
		{ID: "listDeliveries", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: []Param{idParam},
			Output: "{deliveries: [{subscriptionId, eventId, eventType, eventSeq, correlationId, status, attempts: [{at, statusCode, latencyMs, error, response}]}]}",
			Errors: notFound,
			Summary: "The deliveries of a subscription's events kept (a week): each attempt's time, status code, latency and error, " +
				"and the first KiB of the answer; status delivered, retrying or failed (dead-lettered).",
			Handle: s.opListDeliveries},
		{ID: "redeliverSubscription", Capability: "events", Scope: ScopeAdmin, Outcomes: []Outcome{Queued}, Params: []Param{idParam},
			Output: "{id, deadLetters}: how many dead letters are delivered again", Errors: notFound,
			Summary: "Deliver a subscription's dead letters again, in order, before its next events (admin scope).",
			Handle:  s.opRedeliver},
		{ID: "replaySubscription", Capability: "events", Scope: ScopeAdmin, Outcomes: []Outcome{Queued}, Params: []Param{idParam},
			Body:   &Body{Description: "{after: an event sequence} or {since: an RFC 3339 time}: where delivery goes on", Schema: replayBodySchema},
			Output: "{id, after}: delivery goes on with the first event after this sequence", Errors: append(notFound, errs.CodeMalformedJSON),
			Summary: "Move a subscription's delivery to an event sequence or a time, back or forward (admin scope); " +
				"events delivered before are delivered again, each with the webhook-id it had (a receiver that dedupes skips what it kept).",
			Handle: s.opReplay},
	}
}

var replayBodySchema = map[string]any{
	"type": "object", "additionalProperties": false, "maxProperties": 1, "minProperties": 1,
	"properties": map[string]any{
		"after": map[string]any{"type": "integer", "minimum": 0, "description": "the event sequence delivery goes on after"},
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
	if recs == nil {
		recs = []webhook.Delivery{}
	}
	return &Response{Body: map[string]any{"deliveries": recs}}, nil
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
		After *uint64 `json:"after"`
		Since *string `json:"since"`
	}
	_, v, err := bodyObject(r.Body, map[string]bool{"after": true, "since": true}, "after, since")
	if err != nil {
		return nil, err
	}
	v = append(v, envelope.CheckData(r.Body, "$")...)
	if err := json.Unmarshal(r.Body, &in); err != nil {
		v = append(v, errs.Violation{Path: "$", Message: "after must be a whole number, since an RFC 3339 time"})
	}
	if (in.After == nil) == (in.Since == nil) && len(v) == 0 {
		v = append(v, errs.Violation{Path: "$", Message: "give exactly one of after (an event sequence) and since (an RFC 3339 time)"})
	}
	var since time.Time
	if in.Since != nil {
		if since, err = time.Parse(time.RFC3339Nano, *in.Since); err != nil {
			v = append(v, errs.Violation{Path: "$.since", Message: "must be an RFC 3339 time"})
		}
	}
	if len(v) > 0 {
		return nil, errs.Invalid("the request body is invalid", v)
	}
	after := uint64(0)
	if in.After != nil {
		after = *in.After
	} else if after, err = s.seqBefore(ctx, since); err != nil {
		return nil, errs.Internal(err)
	}
	if err := s.p.Webhooks.Replay(ctx, r.Tenant, sub.ID, after); err != nil {
		return nil, errs.Internal(err)
	}
	return &Response{Outcome: Queued, Body: map[string]any{"id": sub.ID, "after": strconv.FormatUint(after, 10)}}, nil
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
