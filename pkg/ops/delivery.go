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
	"github.com/agentbus/agentbus/pkg/project"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// SourceWebhooks is the envelope source of the commands webhook delivery
// submits (DisableSubscription, MarkSubscriptionFailing, and
// EnableSubscription when a failing subscription delivers again).
const SourceWebhooks = "agentbus/webhooks"

// Delivery is what webhook delivery reads of the registry and how it
// reports what it decided, through the same path as POST /commands:
// webhook.Subscriptions and webhook.Outcomes.
type Delivery struct{ s *Surface }

var (
	_ webhook.Subscriptions = Delivery{}
	_ webhook.Outcomes      = Delivery{}
)

// Delivery returns the surface's side of webhook delivery.
func (s *Surface) Delivery() Delivery { return Delivery{s} }

// All implements webhook.Subscriptions: every tenant's subscriptions.
func (d Delivery) All() []webhook.Subscription {
	regs := d.s.p.Registries.Subscriptions
	var out []webhook.Subscription
	for _, tenant := range regs.Tenants() {
		regs.Each(tenant, func(sub decide.Subscription) bool {
			w := webhook.Subscription{Tenant: tenant, ID: sub.ID, URL: sub.Webhook.URL,
				Active: sub.Status != decide.SubscriptionDisabled, Failing: sub.Status == decide.SubscriptionFailing}
			w.Since, _ = time.Parse(time.RFC3339Nano, sub.UpdatedAt)
			if sub.Filter != nil {
				w.Types = sub.Filter.Types
			}
			out = append(out, w)
			return true
		})
	}
	return out
}

// Start implements webhook.Subscriptions: a subscription delivers the
// events stored after its SubscriptionCreated.
func (d Delivery) Start(ctx context.Context, tenant, id string) (uint64, error) {
	m, err := d.s.p.Events.Last(ctx, d.s.subj.Event(bus.RootEvents, tenant, decide.AggSubscription, id, decide.TypeSubscriptionCreated))
	if err != nil {
		return 0, err
	}
	return m.Seq, nil
}

// Disable implements webhook.Outcomes.
func (d Delivery) Disable(ctx context.Context, tenant, id string, eventSeq uint64, reason string) error {
	return d.submit(ctx, tenant, d.episode("gone"), decide.TypeDisableSubscription, id, eventSeq, map[string]any{"id": id, "reason": clipReason(reason)})
}

// Failing implements webhook.Outcomes. The command does not carry the
// event's sequence (the log's, which every tenant shares): its delivery
// record names the event.
func (d Delivery) Failing(ctx context.Context, tenant, id string, eventSeq uint64, reason string) error {
	return d.submit(ctx, tenant, d.episode("failing"), decide.TypeMarkSubscriptionFailing, id, eventSeq,
		map[string]any{"id": id, "reason": clipReason(reason)})
}

// Recovered implements webhook.Outcomes.
func (d Delivery) Recovered(ctx context.Context, tenant, id string, eventSeq uint64) error {
	return d.submit(ctx, tenant, d.episode("recovered"), decide.TypeEnableSubscription, id, eventSeq, map[string]any{"id": id, "onlyIfFailing": true})
}

// episode names one report of what: the same event may be refused again
// after an enable (a second 410, a second dead letter), and each such
// report must be a command of its own, not a copy the receipts drop. A
// report repeated after a crash is then a command more, which the
// deciders reject as already done (CONFLICT).
func (d Delivery) episode(what string) string {
	return what + "-" + strconv.FormatInt(d.s.now().UnixMilli(), 36)
}

// submit queues a control command for subscription id, with an id of its
// own per (what, event): the event named by its cursor, which shows no
// sequence and is the same on every replica.
func (d Delivery) submit(ctx context.Context, tenant, what, typ, id string, eventSeq uint64, data map[string]any) error {
	entry := d.s.commandEntry(typ)
	env := &envelope.Envelope{
		SpecVersion: envelope.SpecVersion, ID: what + "-" + id + "-" + d.s.reads.Cursor(tenant, false, eventSeq),
		Source: SourceWebhooks, Type: typ, DataContentType: envelope.ContentType,
		DataSchema: entry.Schema + "/" + entry.Version, Time: decide.Stamp(d.s.now()), Data: decide.MustJSON(data),
	}
	if _, err := d.s.cat.ResolveCommand(env); err != nil {
		return err
	}
	_, err := d.s.in.Enqueue(ctx, tenant, env, entry, env.Marshal())
	return err
}

// clipReason keeps a reason within the commands' schema
// (decide.MaxReasonLen), cut on a character boundary.
func clipReason(r string) string {
	if len(r) <= decide.MaxReasonLen {
		return r
	}
	return project.Truncate(r, decide.MaxReasonLen-3) + "..."
}

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
