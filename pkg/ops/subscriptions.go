package ops

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
	"github.com/agentbus/agentbus/pkg/project"
	"github.com/agentbus/agentbus/pkg/secrets"
)

// SecretStore keeps the signing secrets of webhook subscriptions apart
// from the command and event logs (ingest.SecretStore), and reads a
// subscription's current one back for its owner.
type SecretStore interface {
	ingest.SecretStore
	// Current returns the current secret of subscription id;
	// errs.ErrNotFound when it has none.
	Current(ctx context.Context, tenant, id string) (string, error)
}

var _ SecretStore = (*secrets.Store)(nil)

// URLChecker decides whether agentbus may deliver to a webhook URL
// (ingest.URLChecker).
type URLChecker = ingest.URLChecker

// subscriptionOperations are the webhook subscription operations.
func (s *Surface) subscriptionOperations() []Operation {
	const slow = " Answers queued (202) with the trace's Location when the outcome takes longer than registry.waitTimeout."
	notFound := []errs.Code{errs.CodeSubscriptionNotFound}
	createBody := &Body{Description: "a subscription: {serviceId?, webhook: {url, secret?}, filter?: {types}}",
		Schema: s.dataSchema(decide.TypeCreateSubscription)}
	rotateBody := &Body{Description: "{secret?}: the new secret; left out, one is generated (read it with getSubscriptionSecret)", Schema: rotateBodySchema}
	return []Operation{
		{ID: "createSubscription", Capability: "events", Scope: ScopeWrite, Body: createBody, Outcomes: []Outcome{Created, Queued},
			Output: "the subscription record {id, serviceId?, webhook: {url}, filter?, status, createdAt, updatedAt}, never its secret",
			Errors: []errs.Code{errs.CodeMalformedJSON, errs.CodeWebhookURLRejected, errs.CodeServiceNotFound, errs.CodeQuotaExceeded},
			Summary: "Create a webhook subscription (CreateSubscription): the tenant's events (of filter.types) are delivered to webhook.url, signed. " +
				"No secret given, one is generated; no answer carries the secret but getSubscriptionSecret's. SERVICE_NOT_FOUND for an unknown serviceId; WEBHOOK_URL_REJECTED for a URL it may not deliver to." + slow,
			Handle: s.opCreateSubscription},
		{ID: "listSubscriptions", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: s.pageParams(),
			Output:  "{subscriptions: [subscription records], next?: cursor}",
			Summary: "List webhook subscriptions by id, a page at a time (never their secrets).", Handle: s.opListSubscriptions},
		{ID: "getSubscription", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: []Param{idParam},
			Output: "the subscription record", Errors: notFound,
			Summary: "Get a webhook subscription, with its status (active, failing, disabled); SUBSCRIPTION_NOT_FOUND.", Handle: s.opGetSubscription},
		{ID: "deleteSubscription", Capability: "events", Scope: ScopeWrite, Outcomes: []Outcome{Empty, Queued}, Params: []Param{idParam}, Errors: notFound,
			Summary: "Delete a webhook subscription (DeleteSubscription); its secret is erased." + slow, Handle: s.opChange(decide.TypeDeleteSubscription)},
		{ID: "getSubscriptionSecret", Capability: "events", Scope: ScopeWrite, Outcomes: []Outcome{Done}, Params: []Param{idParam},
			Output: "{id, secret}: the current signing secret", Errors: notFound,
			Summary: "Get a subscription's current signing secret, given or generated, to verify its deliveries with (needs the write scope); " +
				"the only answer that carries a secret. SUBSCRIPTION_NOT_FOUND.",
			Handle: s.opGetSecret},
		{ID: "rotateSubscriptionSecret", Capability: "events", Scope: ScopeWrite, Body: rotateBody, Outcomes: []Outcome{Done, Queued},
			Params: []Param{idParam},
			Output: "{id, previousSecretValidUntil}, never the secret",
			Errors: []errs.Code{errs.CodeMalformedJSON, errs.CodeSubscriptionNotFound},
			Summary: "Replace a subscription's signing secret (RotateSubscriptionSecret); the previous one keeps signing beside it until previousSecretValidUntil " +
				"(subscriptions.rotationOverlap). No secret given, one is generated: read it with getSubscriptionSecret." + slow,
			Handle: s.opRotateSecret},
		{ID: "enableSubscription", Capability: "events", Scope: ScopeWrite, Outcomes: []Outcome{Empty, Queued}, Params: []Param{idParam},
			Errors:  []errs.Code{errs.CodeSubscriptionNotFound, errs.CodeSubscriptionActive},
			Summary: "Enable a disabled or failing subscription again (EnableSubscription); SUBSCRIPTION_ALREADY_ACTIVE." + slow, Handle: s.opChange(decide.TypeEnableSubscription)},
	}
}

// rotateBodySchema is the JSON Schema of rotateSubscriptionSecret's body.
var rotateBodySchema = map[string]any{
	"type": "object", "additionalProperties": false,
	"properties": map[string]any{"secret": map[string]any{
		"type": "string", "minLength": secrets.MinLen, "maxLength": secrets.MaxLen, "pattern": "^[\\x21-\\x7E]+$", "writeOnly": true,
		"description": "the new signing secret: whsec_ and the base64 of 24 to 64 bytes, or 24 to 256 other printable ASCII characters; left out, one is generated",
	}},
	"examples": []any{map[string]any{}, map[string]any{"secret": "whsec_bmV3LWV4YW1wbGUtc2VjcmV0LTI0LWJ5dGVzIQ=="}},
}

var subscriptionFields = map[string]bool{"serviceId": true, "webhook": true, "filter": true}

// subscriptionBody checks a POST /subscriptions body strictly: a JSON
// object with only the subscription's fields, each key once (in webhook
// too), valid under the CreateSubscription schema, with a usable secret if
// one is given. It returns the command data, without the secret, and the
// secret ("" when none was given).
func (s *Surface) subscriptionBody(entry *catalog.Entry, body []byte) ([]byte, string, error) {
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

// opCreateSubscription stores the secret (given, or generated) under the
// id the subscription will have — its command's correlation id — checks
// the URL, then submits CreateSubscription and waits for the registry.
// When the command is rejected the cascade erases the secret.
func (s *Surface) opCreateSubscription(ctx context.Context, r *Request) (*Response, error) {
	entry := s.commandEntry(decide.TypeCreateSubscription)
	data, secret, err := s.subscriptionBody(entry, r.Body)
	if err != nil {
		return nil, err
	}
	var in struct {
		Webhook decide.Webhook `json:"webhook"`
	}
	_ = decide.DecodeData(data, &in) // checked against the schema
	if _, err := s.p.URLs.CheckURL(ctx, in.Webhook.URL); err != nil {
		return nil, err
	}
	if secret == "" {
		if secret, err = secrets.Generate(); err != nil {
			return nil, errs.Internal(err)
		}
	}
	env := s.controlEnvelope(entry, data)
	id := envelope.CorrelationID(r.Tenant, env.Source, env.ID)
	if err := s.p.Secrets.Create(ctx, r.Tenant, id, secret); err != nil {
		return nil, errs.Internal(err)
	}
	out, err := s.runEnvelope(ctx, r.Tenant, entry, env, waitFor{reg: s.p.Registries.Subscriptions})
	if err != nil {
		return nil, err
	}
	if out.pending != "" {
		return out.queued(), nil
	}
	rec, ok := s.p.Registries.Subscriptions.Get(r.Tenant, id)
	if !ok { // deleted again in the meantime: the trace tells the story
		out.pending = project.StatusProcessed
		return out.queued(), nil
	}
	return &Response{Outcome: Created, Body: rec, Location: "/subscriptions/" + id}, nil
}

// opRotateSecret stores the new secret (given, or generated) on behalf of
// the RotateSubscriptionSecret command it then submits, which records when
// the previous secret stops signing.
func (s *Surface) opRotateSecret(ctx context.Context, r *Request) (*Response, error) {
	id := r.Param("id")
	if err := checkID(id); err != nil {
		return nil, err
	}
	secret, err := rotationBody(r.Body)
	if err != nil {
		return nil, err
	}
	if _, ok := s.p.Registries.Subscriptions.Get(r.Tenant, id); !ok {
		return nil, subscriptionNotFound(id)
	}
	if secret == "" {
		if secret, err = secrets.Generate(); err != nil {
			return nil, errs.Internal(err)
		}
	}
	entry := s.commandEntry(decide.TypeRotateSubscriptionSecret)
	env := s.controlEnvelope(entry, nil)
	until, err := s.p.Secrets.Rotate(ctx, r.Tenant, id, secret, envelope.CorrelationID(r.Tenant, env.Source, env.ID))
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return nil, subscriptionNotFound(id)
	case err != nil:
		return nil, errs.Internal(err)
	}
	stamp := decide.Stamp(until)
	env.Data = decide.MustJSON(map[string]string{"id": id, "previousSecretValidUntil": stamp})
	out, err := s.runEnvelope(ctx, r.Tenant, entry, env, waitFor{reg: s.p.Registries.Subscriptions})
	if err != nil {
		return nil, err
	}
	if out.pending != "" {
		return out.queued(), nil
	}
	return &Response{Body: map[string]string{"id": id, "previousSecretValidUntil": stamp}}, nil
}

// opGetSecret answers the current signing secret of a subscription the
// registry knows, marked Private: the one answer that carries a secret.
func (s *Surface) opGetSecret(ctx context.Context, r *Request) (*Response, error) {
	id := r.Param("id")
	if err := checkID(id); err != nil {
		return nil, err
	}
	if _, ok := s.p.Registries.Subscriptions.Get(r.Tenant, id); !ok {
		return nil, subscriptionNotFound(id)
	}
	secret, err := s.p.Secrets.Current(ctx, r.Tenant, id)
	switch {
	case errors.Is(err, errs.ErrNotFound): // deleted meanwhile
		return nil, subscriptionNotFound(id)
	case err != nil:
		return nil, errs.Internal(err)
	}
	return &Response{Body: map[string]string{"id": id, "secret": secret}, Private: true}, nil
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

func subscriptionNotFound(id string) error {
	return errs.New(errs.CodeSubscriptionNotFound, "subscription %q does not exist", id)
}

func (s *Surface) opListSubscriptions(_ context.Context, r *Request) (*Response, error) {
	limit, after, err := s.page(r)
	if err != nil {
		return nil, err
	}
	list, next := s.p.Registries.Subscriptions.List(r.Tenant, after, limit)
	body := map[string]any{"subscriptions": list}
	if next != "" {
		body["next"] = next
	}
	return &Response{Body: body}, nil
}

func (s *Surface) opGetSubscription(_ context.Context, r *Request) (*Response, error) {
	rec, err := s.subscription(r)
	if err != nil {
		return nil, err
	}
	return &Response{Body: rec}, nil
}
