package decide

// Webhook subscriptions as event-sourced aggregates, like agents and
// services:
//
//	agentbus.evt.<tenant>.subscription.<id>.SubscriptionCreated|SubscriptionDeleted|
//	    SubscriptionSecretRotated|SubscriptionDisabled|SubscriptionFailing|SubscriptionEnabled
//
// A subscription's id is the correlation id of the CreateSubscription
// command that created it: unique for ever, so nothing kept under it (its
// signing secret, a delivery cursor) can be left over from an earlier
// subscription. Its signing secret never enters a command or an event:
// agentbus stores it apart, encrypted, before it queues the command, which
// carries none (pkg/secrets, pkg/ops).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// Subscription command and event types, and their aggregate type.
const (
	TypeCreateSubscription        = "CreateSubscription"
	TypeDeleteSubscription        = "DeleteSubscription"
	TypeRotateSubscriptionSecret  = "RotateSubscriptionSecret"
	TypeDisableSubscription       = "DisableSubscription"
	TypeEnableSubscription        = "EnableSubscription"
	TypeMarkSubscriptionFailing   = "MarkSubscriptionFailing"
	TypeSubscriptionCreated       = "SubscriptionCreated"
	TypeSubscriptionDeleted       = "SubscriptionDeleted"
	TypeSubscriptionSecretRotated = "SubscriptionSecretRotated"
	TypeSubscriptionDisabled      = "SubscriptionDisabled"
	TypeSubscriptionEnabled       = "SubscriptionEnabled"
	TypeSubscriptionFailing       = "SubscriptionFailing"

	AggSubscription = bus.AggSubscription
)

// Subscription statuses: active (delivered), failing (delivered; its last
// delivery was given up and dead-lettered), disabled (not delivered until
// enabled again).
const (
	SubscriptionActive   = "active"
	SubscriptionFailing  = "failing"
	SubscriptionDisabled = "disabled"
)

// MaxWebhookURLLen bounds webhook.url (the schemas' maxLength).
const MaxWebhookURLLen = 2048

// Subscription is the subscriptions registry's record of a subscription.
// It never holds a secret.
type Subscription struct {
	ID        string  `json:"id"`
	ServiceID string  `json:"serviceId,omitempty"`
	Webhook   Webhook `json:"webhook"`
	// Filter is nil when every event type is delivered.
	Filter       *Filter `json:"filter,omitempty"`
	Status       string  `json:"status"`
	StatusReason string  `json:"statusReason,omitempty"`
	CreatedAt    string  `json:"createdAt"`
	UpdatedAt    string  `json:"updatedAt"`
}

// Webhook is where a subscription's events go. The signing secret is not
// here: it is kept apart (pkg/secrets).
type Webhook struct {
	URL string `json:"url"`
}

// Filter lists the event types a subscription is delivered.
type Filter struct {
	Types []string `json:"types"`
}

// Delivers reports whether the subscription is delivered events of type
// typ: it is not disabled, and its filter (if any) lists typ.
func (s Subscription) Delivers(typ string) bool {
	if s.Status == SubscriptionDisabled {
		return false
	}
	if s.Filter == nil {
		return true
	}
	for _, t := range s.Filter.Types {
		if t == typ {
			return true
		}
	}
	return false
}

// SubscriptionCreatedData is the data of SubscriptionCreated.
type SubscriptionCreatedData struct {
	ID        string  `json:"id"`
	ServiceID string  `json:"serviceId,omitempty"`
	Webhook   Webhook `json:"webhook"`
	Filter    *Filter `json:"filter,omitempty"`
	Status    string  `json:"status"`
	CreatedAt string  `json:"createdAt"`
}

// SubscriptionChange is the data of SubscriptionSecretRotated,
// SubscriptionDisabled, SubscriptionFailing and SubscriptionEnabled: the
// subscription's status after the event and what changed.
// (SubscriptionDeleted carries a Change.)
type SubscriptionChange struct {
	ID     string `json:"id"`
	At     string `json:"at"`
	Status string `json:"status"`
	// Reason says why it was disabled or is failing.
	Reason string `json:"reason,omitempty"`
	// EventSeq is the event log sequence of the event whose delivery was
	// given up (SubscriptionFailing).
	EventSeq uint64 `json:"eventSeq,omitempty"`
	// PreviousSecretValidUntil is when the secret replaced by a rotation
	// stops signing deliveries (SubscriptionSecretRotated).
	PreviousSecretValidUntil string `json:"previousSecretValidUntil,omitempty"`
}

// DisableSubscriptionData is the data of DisableSubscription: the webhook
// dispatcher sends it when a receiver answers 410 Gone.
type DisableSubscriptionData struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// MarkSubscriptionFailingData is the data of MarkSubscriptionFailing: the
// webhook dispatcher sends it when it gives up delivering an event (and
// dead-letters it).
type MarkSubscriptionFailingData struct {
	ID       string `json:"id"`
	Reason   string `json:"reason"`
	EventSeq uint64 `json:"eventSeq,omitempty"`
}

// MaxReasonLen bounds the reason of DisableSubscription and
// MarkSubscriptionFailing (the schemas' maxLength).
const MaxReasonLen = 1000

// SubscriptionPorts are what the subscription deciders read besides the
// event log.
type SubscriptionPorts struct {
	// Count returns how many subscriptions tenant has (the registry, which
	// may lag the log by a moment: concurrent creations may pass Max by
	// as many as run at once).
	Count func(tenant string) int
	// Max is how many subscriptions a tenant may have; 0: no bound.
	Max int
	// SecretStored reports whether subscription id of tenant has its
	// signing secret stored. An error is transient (the command is tried
	// again).
	SecretStored func(ctx context.Context, tenant, id string) (bool, error)
}

// subscriptionDeciders are the subscription commands' deciders.
func (c ControlPlane) subscriptionDeciders() map[string]Decider {
	return map[string]Decider{
		TypeCreateSubscription:       DeciderFunc(c.decideCreateSubscription),
		TypeDeleteSubscription:       DeciderFunc(c.decideSubscriptionChange(TypeDeleteSubscription)),
		TypeRotateSubscriptionSecret: DeciderFunc(c.decideSubscriptionChange(TypeRotateSubscriptionSecret)),
		TypeDisableSubscription:      DeciderFunc(c.decideSubscriptionChange(TypeDisableSubscription)),
		TypeEnableSubscription:       DeciderFunc(c.decideSubscriptionChange(TypeEnableSubscription)),
		TypeMarkSubscriptionFailing:  DeciderFunc(c.decideSubscriptionChange(TypeMarkSubscriptionFailing)),
	}
}

// WebhookURLProblem says what makes s unusable as a webhook URL by its
// syntax alone, or returns "": an absolute http or https URL with a host,
// no user or password, no fragment, no spaces or control characters, at
// most MaxWebhookURLLen characters. Where it points is checked elsewhere
// (the operations ask DNS; deliveries check the address dialled).
func WebhookURLProblem(s string) string {
	if len(s) > MaxWebhookURLLen {
		return "the URL is longer than 2048 characters"
	}
	u, ok := envelope.HTTPURL(s)
	switch {
	case !ok:
		return "the URL must be an absolute http or https URL with a host, without spaces or control characters"
	case u.User != nil:
		return "the URL must not carry a user name or password"
	case strings.Contains(s, "#"):
		return "the URL must not have a fragment"
	}
	return ""
}

// createSubscriptionIn is the data of CreateSubscription as a decider
// reads it: Secret only to refuse a command that carries one.
type createSubscriptionIn struct {
	ServiceID string `json:"serviceId"`
	Webhook   struct {
		URL    string          `json:"url"`
		Secret json.RawMessage `json:"secret"`
	} `json:"webhook"`
	Filter *Filter `json:"filter"`
}

// secretInCommand is why a stored command carrying a secret is rejected.
const secretInCommand = "must not be stored with the command: submit it through POST /commands or the subscription operations, which keep the secret apart, encrypted"

// decideCreateSubscription decides CreateSubscription: SubscriptionCreated
// for the subscription whose id is the command's correlation id. Rejected
// when its data carries a secret (it must never be stored with a command,
// let alone in an event), its URL or types are invalid, the service it
// names is not registered (SERVICE_NOT_FOUND), the tenant has its quota of
// subscriptions (QUOTA_EXCEEDED), or no signing secret was stored for it.
func (c ControlPlane) decideCreateSubscription(ctx context.Context, cmd Command, s State) (Decision, error) {
	var in createSubscriptionIn
	if err := DecodeData(cmd.Envelope.Data, &in); err != nil {
		return Rejected(errs.CodeValidationFailed, "data is not a subscription: %v", err), nil
	}
	if in.Webhook.Secret != nil {
		return Rejected(errs.CodeValidationFailed, "webhook.secret "+secretInCommand), nil
	}
	if why := WebhookURLProblem(in.Webhook.URL); why != "" {
		return Decision{Reject: &errs.Error{Code: errs.CodeWebhookURLRejected, Message: "webhook.url is rejected: " + why}}, nil
	}
	if in.Filter != nil {
		if len(in.Filter.Types) == 0 {
			return Rejected(errs.CodeValidationFailed, "filter.types must list at least one event type (leave filter out for every type)"), nil
		}
		for _, t := range in.Filter.Types {
			if !envelope.ValidType(t) {
				return Rejected(errs.CodeValidationFailed, "filter.types: every entry must be an event type in PascalCase"), nil
			}
		}
	}
	id := cmd.CorrelationID
	if !envelope.ValidTokenID(id) {
		return Rejected(errs.CodeValidationFailed, "the command has no correlation id to name the subscription by"), nil
	}
	h, err := c.head(ctx, s, cmd, AggSubscription, id)
	switch {
	case err != nil:
		return Decision{}, err
	case h.mine:
		return Decision{}, nil // a redelivery of the command that wrote it
	case h.last != nil:
		return Rejected(errs.CodeConflict, "subscription %q exists already", id), nil
	}
	if in.ServiceID != "" {
		if !envelope.ValidTokenID(in.ServiceID) {
			return Rejected(errs.CodeValidationFailed, "serviceId must be "+IDRule), nil
		}
		sh, err := c.head(ctx, s, cmd, AggService, in.ServiceID)
		if err != nil {
			return Decision{}, err
		}
		if sh.last == nil || sh.typ == TypeServiceDeleted {
			return Rejected(errs.CodeServiceNotFound, "service %q is not registered", in.ServiceID), nil
		}
	}
	p := c.Subscriptions
	if p.Max > 0 && p.Count(cmd.Tenant) >= p.Max {
		return Rejected(errs.CodeQuotaExceeded, "the tenant has %d subscriptions, its quota (quotas.subscriptions): delete one first", p.Max), nil
	}
	stored, err := p.SecretStored(ctx, cmd.Tenant, id)
	if err != nil {
		return Decision{}, err
	}
	if !stored {
		return Rejected(errs.CodeValidationFailed, "no signing secret is stored for this subscription: submit CreateSubscription through POST /commands or POST /subscriptions, not straight to NATS"), nil
	}
	var filter *Filter
	if in.Filter != nil {
		filter = &Filter{Types: in.Filter.Types}
	}
	out := SubscriptionCreatedData{ID: id, ServiceID: in.ServiceID, Webhook: Webhook{URL: in.Webhook.URL},
		Filter: filter, Status: SubscriptionActive, CreatedAt: c.stamp()}
	ev := NewEvent{Type: TypeSubscriptionCreated, AggType: AggSubscription, AggID: id, Data: MustJSON(out)}
	return Decision{Events: []NewEvent{ev}, Expect: &bus.Expect{LastSeq: 0}}, nil
}

// subscriptionChangeIn is the data of the other subscription commands.
type subscriptionChangeIn struct {
	ID                       string          `json:"id"`
	Reason                   string          `json:"reason"`
	EventSeq                 uint64          `json:"eventSeq"`
	OnlyIfFailing            bool            `json:"onlyIfFailing"`
	Secret                   json.RawMessage `json:"secret"`
	PreviousSecretValidUntil string          `json:"previousSecretValidUntil"`
}

// decideSubscriptionChange decides DeleteSubscription,
// RotateSubscriptionSecret, DisableSubscription, EnableSubscription and
// MarkSubscriptionFailing from the subscription's last event: none or
// SubscriptionDeleted → SUBSCRIPTION_NOT_FOUND; disabling a disabled one,
// or marking it failing → CONFLICT; enabling an active one →
// SUBSCRIPTION_ALREADY_ACTIVE. A rotation must name when the previous
// secret stops signing, which agentbus writes into the command once it
// stored the new secret, and must carry no secret.
func (c ControlPlane) decideSubscriptionChange(cmdType string) func(context.Context, Command, State) (Decision, error) {
	return func(ctx context.Context, cmd Command, s State) (Decision, error) {
		id, h, done, err := c.registered(ctx, s, cmd, AggSubscription, TypeSubscriptionDeleted, errs.CodeSubscriptionNotFound)
		if done != nil && done.Reject != nil && done.Reject.Code == errs.CodeSubscriptionNotFound {
			done.Reject.Message = fmt.Sprintf("subscription %q does not exist", id)
		}
		if err != nil || done != nil {
			return deref(done), err
		}
		var in subscriptionChangeIn
		if err := DecodeData(cmd.Envelope.Data, &in); err != nil {
			return Rejected(errs.CodeValidationFailed, "data does not decode: %v", err), nil
		}
		status := statusOf(h.last)
		change := SubscriptionChange{ID: id, At: c.stamp(), Status: status}
		var typ string
		switch cmdType {
		case TypeDeleteSubscription:
			ev := NewEvent{Type: TypeSubscriptionDeleted, AggType: AggSubscription, AggID: id, Data: MustJSON(Change{ID: id, At: change.At})}
			return Decision{Events: []NewEvent{ev}, Expect: &bus.Expect{LastSeq: h.seq()}}, nil
		case TypeRotateSubscriptionSecret:
			if in.Secret != nil {
				return Rejected(errs.CodeValidationFailed, "secret "+secretInCommand), nil
			}
			if _, err := time.Parse(time.RFC3339Nano, in.PreviousSecretValidUntil); err != nil {
				return Rejected(errs.CodeValidationFailed, "previousSecretValidUntil is not set: agentbus sets it when it stores the new secret; submit RotateSubscriptionSecret through POST /commands or POST /subscriptions/{id}/secret, not straight to NATS"), nil
			}
			typ, change.PreviousSecretValidUntil = TypeSubscriptionSecretRotated, in.PreviousSecretValidUntil
		case TypeDisableSubscription:
			if status == SubscriptionDisabled {
				return Rejected(errs.CodeConflict, "subscription %q is disabled already", id), nil
			}
			typ, change.Status, change.Reason = TypeSubscriptionDisabled, SubscriptionDisabled, in.Reason
		case TypeMarkSubscriptionFailing:
			if status == SubscriptionDisabled {
				return Rejected(errs.CodeConflict, "subscription %q is disabled: it is not delivered, so it cannot be failing", id), nil
			}
			typ, change.Status, change.Reason, change.EventSeq = TypeSubscriptionFailing, SubscriptionFailing, in.Reason, in.EventSeq
		default: // TypeEnableSubscription
			if in.OnlyIfFailing && status != SubscriptionFailing {
				return Rejected(errs.CodeConflict, "subscription %q is %s, not failing: left as it is", id, status), nil
			}
			if status == SubscriptionActive {
				return Rejected(errs.CodeSubscriptionActive, "subscription %q is active already", id), nil
			}
			typ, change.Status = TypeSubscriptionEnabled, SubscriptionActive
		}
		ev := NewEvent{Type: typ, AggType: AggSubscription, AggID: id, Data: MustJSON(change)}
		return Decision{Events: []NewEvent{ev}, Expect: &bus.Expect{LastSeq: h.seq()}}, nil
	}
}

// statusOf is the status a subscription event leaves its subscription in
// (every event but SubscriptionDeleted names it); active when it names
// none.
func statusOf(m *bus.Message) string {
	data, err := EventData(m)
	var d struct {
		Status string `json:"status"`
	}
	if err != nil || json.Unmarshal(data, &d) != nil {
		return SubscriptionActive
	}
	switch d.Status {
	case SubscriptionFailing, SubscriptionDisabled:
		return d.Status
	}
	return SubscriptionActive
}

// FoldSubscription is the subscription aggregate's Fold.
func FoldSubscription(cur *Subscription, id, typ string, data json.RawMessage) (*Subscription, bool) {
	switch typ {
	case TypeSubscriptionCreated:
		var d SubscriptionCreatedData
		if err := json.Unmarshal(data, &d); err != nil || d.ID != id || WebhookURLProblem(d.Webhook.URL) != "" ||
			(d.ServiceID != "" && !envelope.ValidTokenID(d.ServiceID)) {
			return cur, false
		}
		if d.Filter != nil {
			for _, t := range d.Filter.Types {
				if !envelope.ValidType(t) {
					return cur, false
				}
			}
		}
		return &Subscription{ID: id, ServiceID: d.ServiceID, Webhook: d.Webhook, Filter: d.Filter,
			Status: SubscriptionActive, CreatedAt: d.CreatedAt, UpdatedAt: d.CreatedAt}, true
	case TypeSubscriptionSecretRotated, TypeSubscriptionDisabled, TypeSubscriptionFailing, TypeSubscriptionEnabled:
		if cur == nil {
			return nil, true
		}
		var c SubscriptionChange
		if err := json.Unmarshal(data, &c); err != nil || c.ID != id {
			return cur, false
		}
		next := *cur
		next.UpdatedAt = c.At
		switch typ {
		case TypeSubscriptionDisabled:
			next.Status, next.StatusReason = SubscriptionDisabled, c.Reason
		case TypeSubscriptionFailing:
			next.Status, next.StatusReason = SubscriptionFailing, c.Reason
		case TypeSubscriptionEnabled:
			next.Status, next.StatusReason = SubscriptionActive, ""
		}
		return &next, true
	case TypeSubscriptionDeleted:
		return deleted(cur, id, data)
	}
	return cur, true
}

// CommandMessage builds the command-log message of a built-in command that
// agentbus sends on its own (the subscription cascade, the webhook
// dispatcher), with source and id chosen so that sending it again — a
// retry, another replica — is recognised as the same command: its
// correlation id, returned, is derived from them. data must marshal to a
// JSON object valid under the type's catalogue schema (version 1.0).
func CommandMessage(subj bus.Subjects, tenant, source, id, typ string, data any, at time.Time) (*bus.Message, string) {
	env := &envelope.Envelope{
		SpecVersion: envelope.SpecVersion, ID: id, Source: source, Type: typ,
		DataContentType: envelope.ContentType, DataSchema: envelope.KebabCase(typ) + "/1.0",
		Time: Stamp(at), Data: MustJSON(data),
	}
	corr := envelope.CorrelationID(tenant, source, id)
	return &bus.Message{
		Subject: subj.Command(tenant, typ),
		Header:  bus.Header{bus.HeaderMsgID: {corr}, bus.HeaderCorrelationID: {corr}},
		Data:    env.Marshal(),
	}, corr
}
