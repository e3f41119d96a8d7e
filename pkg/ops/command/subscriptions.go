package command

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/ops/op"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/secrets"
)

var subscriptionFields = map[string]bool{"serviceId": true, "webhook": true, "filter": true}

// subscriptionBody checks a POST /subscriptions body strictly: a JSON
// object with only the subscription's fields, each key once (in webhook
// too), valid under the CreateSubscription schema, with a usable secret if
// one is given. It returns the command data, without the secret, and the
// secret ("" when none was given).
func (g *Registry) subscriptionBody(entry *catalog.Entry, body []byte) ([]byte, string, error) {
	_, v, err := bodyObject(body, subscriptionFields, "serviceId, webhook, filter")
	if err != nil {
		return nil, "", err
	}
	schemaSaid := map[string]bool{}
	for _, sv := range entry.Validate(body) {
		sv.Path = "$" + strings.TrimPrefix(sv.Path, "$.data")
		v = append(v, sv)
		schemaSaid[sv.Path] = true
	}
	data, secret, sv := ingest.SplitSecret(body, "$")
	for _, x := range sv {
		if !schemaSaid[x.Path] { // the schema's own word on it is enough
			v = append(v, x)
		}
	}
	if len(v) > 0 {
		sort.SliceStable(v, func(i, j int) bool { return v[i].Path < v[j].Path })
		return nil, "", errs.Invalid("the request body is invalid", v)
	}
	return data, secret, nil
}

// CreateSubscription is createSubscription: it stores the secret (given,
// or generated) under the id the subscription will have — its command's
// correlation id — checks the URL, then submits CreateSubscription and
// waits for the registry. When the command is rejected the cascade erases
// the secret.
func (g *Registry) CreateSubscription(ctx context.Context, r *op.Request) (*op.Response, error) {
	entry := latest(g.cat, decide.TypeCreateSubscription)
	data, secret, err := g.subscriptionBody(entry, r.Body)
	if err != nil {
		return nil, err
	}
	var in struct {
		Webhook decide.Webhook `json:"webhook"`
	}
	_ = decide.DecodeData(data, &in) // checked against the schema
	if _, err := g.p.URLs.CheckURL(ctx, in.Webhook.URL); err != nil {
		return nil, err
	}
	if secret == "" {
		if secret, err = secrets.Generate(); err != nil {
			return nil, errs.Internal(err)
		}
	}
	env := g.controlEnvelope(entry, data)
	id := envelope.CorrelationID(r.Tenant, env.Source, env.ID)
	if err := g.p.Secrets.Create(ctx, r.Tenant, id, secret); err != nil {
		return nil, errs.Internal(err)
	}
	out, err := g.runEnvelope(ctx, r.Tenant, entry, env, waitFor{reg: g.p.Registries.Subscriptions})
	if err != nil {
		return nil, err
	}
	if out.pending != "" {
		return out.queued(), nil
	}
	rec, ok := g.p.Registries.Subscriptions.Get(r.Tenant, id)
	if !ok { // deleted again in the meantime: the trace tells the story
		out.pending = projection.StatusProcessed
		return out.queued(), nil
	}
	return &op.Response{Outcome: op.Created, Body: rec, Location: "/subscriptions/" + id}, nil
}

// RotateSecret is rotateSubscriptionSecret: it stores the new secret
// (given, or generated) on behalf of the RotateSubscriptionSecret command
// it then submits, which records when the previous secret stops signing.
func (g *Registry) RotateSecret(ctx context.Context, r *op.Request) (*op.Response, error) {
	id := r.Param("id")
	if err := op.CheckID(id); err != nil {
		return nil, err
	}
	secret, err := rotationBody(r.Body)
	if err != nil {
		return nil, err
	}
	if _, ok := g.p.Registries.Subscriptions.Get(r.Tenant, id); !ok {
		return nil, op.SubscriptionNotFound(id)
	}
	if secret == "" {
		if secret, err = secrets.Generate(); err != nil {
			return nil, errs.Internal(err)
		}
	}
	entry := latest(g.cat, decide.TypeRotateSubscriptionSecret)
	env := g.controlEnvelope(entry, nil)
	until, err := g.p.Secrets.Rotate(ctx, r.Tenant, id, secret, envelope.CorrelationID(r.Tenant, env.Source, env.ID))
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return nil, op.SubscriptionNotFound(id)
	case err != nil:
		return nil, errs.Internal(err)
	}
	stamp := decide.Stamp(until)
	env.Data = decide.MustJSON(map[string]string{"id": id, "previousSecretValidUntil": stamp})
	out, err := g.runEnvelope(ctx, r.Tenant, entry, env, waitFor{reg: g.p.Registries.Subscriptions})
	if err != nil {
		return nil, err
	}
	if out.pending != "" {
		return out.queued(), nil
	}
	return &op.Response{Body: map[string]string{"id": id, "previousSecretValidUntil": stamp}}, nil
}

// rotationBody reads rotateSubscriptionSecret's body: {} or {"secret": …}.
func rotationBody(body []byte) (string, error) {
	keys, dups, fields, err := envelope.SplitObject(body)
	if err != nil {
		if e := errs.As(err); e.Code == errs.CodeValidationFailed {
			return "", errs.Invalid("the request body is invalid", e.Violations)
		}
		return "", err
	}
	var v []errs.Violation
	for _, k := range dups {
		v = append(v, errs.Violation{Path: "$." + k, Message: "property appears more than once"})
	}
	for _, k := range keys {
		if k != "secret" {
			v = append(v, errs.Violation{Path: "$." + k, Message: "unknown property (allowed: secret)"})
		}
	}
	var secret string
	if raw, ok := fields["secret"]; ok {
		if json.Unmarshal(raw, &secret) != nil {
			v = append(v, errs.Violation{Path: "$.secret", Message: "must be a string"})
		} else if why := secrets.Problem(secret); why != "" {
			v = append(v, errs.Violation{Path: "$.secret", Message: why})
		}
	}
	if len(v) > 0 {
		sort.SliceStable(v, func(i, j int) bool { return v[i].Path < v[j].Path })
		return "", errs.Invalid("the request body is invalid", v)
	}
	return secret, nil
}
