package server

import (
	"context"
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/text"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// SourceWebhooks is the envelope source of the commands webhook delivery
// submits (DisableSubscription, MarkSubscriptionFailing, and
// EnableSubscription when a failing subscription delivers again).
const SourceWebhooks = "agentbus/webhooks"

// subscriptionList is what delivery reads of the subscriptions registry.
type subscriptionList interface {
	Tenants() []string
	Each(tenant string, fn func(decide.Subscription) bool)
}

// builtinSubmitter queues the built-in commands delivery decides on.
type builtinSubmitter interface {
	SubmitBuiltin(ctx context.Context, tenant, source, id, typ string, data any) error
	EventCursor(tenant string, seq uint64) string
}

var (
	_ subscriptionList = (*projection.Registry[decide.Subscription])(nil)
	_ builtinSubmitter = (*ops.Surface)(nil)
)

// deliveryRegistry is webhook delivery's side of the subscriptions
// registry: what it reads of it (webhook.Subscriptions) and how it reports
// what it decided (webhook.Outcomes), as commands queued the way POST
// /commands queues them, so that each decision is an event. Safe for
// concurrent use.
type deliveryRegistry struct {
	subs   subscriptionList
	events bus.Log // the event log, for a subscription's SubscriptionCreated
	subj   bus.Subjects
	submit builtinSubmitter
	now    func() time.Time
}

var (
	_ webhook.Subscriptions = (*deliveryRegistry)(nil)
	_ webhook.Outcomes      = (*deliveryRegistry)(nil)
)

// ownState are the types of the events about a subscription's delivery
// state: none is delivered to the subscription it is about
// (webhook.Subscription.Skip), so that a failing receiver is not sent the
// SubscriptionFailing its own failure caused.
var ownState = []string{decide.TypeSubscriptionFailing, decide.TypeSubscriptionDisabled, decide.TypeSubscriptionEnabled}

// All implements webhook.Subscriptions: every tenant's subscriptions,
// each skipping the events about its own delivery state.
func (d *deliveryRegistry) All() []webhook.Subscription {
	var out []webhook.Subscription
	for _, tenant := range d.subs.Tenants() {
		d.subs.Each(tenant, func(sub decide.Subscription) bool {
			w := webhook.Subscription{Tenant: tenant, ID: sub.ID, URL: sub.Webhook.URL,
				Active: sub.Status != decide.SubscriptionDisabled, Failing: sub.Status == decide.SubscriptionFailing}
			w.Since, _ = time.Parse(time.RFC3339Nano, sub.UpdatedAt)
			for _, typ := range ownState {
				w.Skip = append(w.Skip, d.subj.Event(bus.RootEvents, tenant, decide.AggSubscription, sub.ID, typ))
			}
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
func (d *deliveryRegistry) Start(ctx context.Context, tenant, id string) (uint64, error) {
	m, err := d.events.Last(ctx, d.subj.Event(bus.RootEvents, tenant, decide.AggSubscription, id, decide.TypeSubscriptionCreated))
	if err != nil {
		return 0, err
	}
	return m.Seq, nil
}

// Disable implements webhook.Outcomes.
func (d *deliveryRegistry) Disable(ctx context.Context, tenant, id string, eventSeq uint64, reason string) error {
	return d.report(ctx, tenant, "gone", decide.TypeDisableSubscription, id, eventSeq, map[string]any{"id": id, "reason": clipReason(reason)})
}

// Failing implements webhook.Outcomes. The command does not carry the
// event's sequence (the log's, which every tenant shares): its delivery
// record names the event.
func (d *deliveryRegistry) Failing(ctx context.Context, tenant, id string, eventSeq uint64, reason string) error {
	return d.report(ctx, tenant, "failing", decide.TypeMarkSubscriptionFailing, id, eventSeq,
		map[string]any{"id": id, "reason": clipReason(reason)})
}

// Recovered implements webhook.Outcomes.
func (d *deliveryRegistry) Recovered(ctx context.Context, tenant, id string, eventSeq uint64) error {
	return d.report(ctx, tenant, "recovered", decide.TypeEnableSubscription, id, eventSeq, map[string]any{"id": id, "onlyIfFailing": true})
}

// report queues a control command for subscription id, with an id of its
// own per episode of what and event. The same event may be refused again
// after an enable (a second 410, a second dead letter), and each such
// report must be a command of its own, not a copy the receipts drop; a
// report repeated after a crash is then a command more, which the deciders
// reject as already done (CONFLICT). The event is named by its cursor,
// which shows no sequence and is the same on every replica.
func (d *deliveryRegistry) report(ctx context.Context, tenant, what, typ, id string, eventSeq uint64, data map[string]any) error {
	episode := what + "-" + strconv.FormatInt(d.now().UnixMilli(), 36)
	return d.submit.SubmitBuiltin(ctx, tenant, SourceWebhooks, episode+"-"+id+"-"+d.submit.EventCursor(tenant, eventSeq), typ, data)
}

// clipReason keeps a reason within the commands' schema
// (decide.MaxReasonLen), cut on a character boundary.
func clipReason(r string) string {
	if len(r) <= decide.MaxReasonLen {
		return r
	}
	return text.Cut(r, decide.MaxReasonLen-3) + "..."
}
