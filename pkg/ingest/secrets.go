package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/secrets"
)

// SecretStore keeps the signing secrets of webhook subscriptions apart
// from the command and event logs (pkg/secrets). The secret passed never
// appears in an error.
type SecretStore interface {
	// Create stores the secret of subscription id; an entry already there
	// (the same command sent again) is kept.
	Create(ctx context.Context, tenant, id, secret string) error
	// Rotate makes secret the current one on behalf of command by; the
	// replaced one keeps signing until the time returned. The same by
	// again changes nothing. errs.ErrNotFound for an unknown id.
	Rotate(ctx context.Context, tenant, id, secret, by string) (time.Time, error)
}

// URLChecker decides whether agentbus may deliver to a webhook URL.
type URLChecker interface {
	// CheckURL returns raw parsed when events may be delivered there, or
	// an error: WEBHOOK_URL_REJECTED (details.reason says why) for a URL
	// that is not allowed, any other for a check that could not be made.
	CheckURL(ctx context.Context, raw string) (*url.URL, error)
}

var _ SecretStore = (*secrets.Store)(nil)

// SplitSecret takes webhook.secret out of the data of a CreateSubscription
// (at path): the data without it, the secret ("" when there is none), and
// what is wrong with it — never quoting it.
func SplitSecret(data []byte, path string) ([]byte, string, []errs.Violation) {
	_, _, fields, err := envelope.SplitObject(data)
	if err != nil {
		return data, "", nil // the schema check reports it
	}
	raw, ok := fields["webhook"]
	if !ok {
		return data, "", nil
	}
	_, dups, hook, err := envelope.SplitObject(raw)
	if err != nil {
		return data, "", nil
	}
	var v []errs.Violation
	for _, k := range dups {
		v = append(v, errs.Violation{Path: path + ".webhook." + k, Message: "property appears more than once"})
	}
	sraw, ok := hook["secret"]
	if !ok {
		return data, "", v
	}
	var secret string
	if json.Unmarshal(sraw, &secret) != nil {
		return data, "", append(v, errs.Violation{Path: path + ".webhook.secret", Message: "must be a string"})
	}
	if why := secrets.Problem(secret); why != "" {
		v = append(v, errs.Violation{Path: path + ".webhook.secret", Message: why})
	}
	delete(hook, "secret")
	fields["webhook"] = decide.MustJSON(hook)
	return decide.MustJSON(fields), secret, v
}

// keepSecretApart is the ingest step of the commands that carry a webhook
// secret (CreateSubscription, RotateSubscriptionSecret) submitted through
// submitCommand: the secret is stored, under the subscription it belongs
// to, and the command is queued without it. It returns the envelope to
// store (env itself, changed), or nil for other types. Through
// submitCommand a secret is required: the subscription operations are
// the ones that generate one. A rotation of a subscription that does not exist is
// queued without its secret, to be rejected like any command about

// carriesSecret reports whether env is of a command whose secret
// keepSecretApart stores before the command is queued.
func carriesSecret(env *envelope.Envelope) bool {
	return env.Type == decide.TypeCreateSubscription || env.Type == decide.TypeRotateSubscriptionSecret
}

// something that does not exist.
func (in *Ingest) keepSecretApart(ctx context.Context, tenant string, env *envelope.Envelope) ([]byte, error) {
	corr := envelope.CorrelationID(tenant, env.Source, env.ID)
	switch env.Type {
	case decide.TypeCreateSubscription:
		data, secret, v := SplitSecret(env.Data, "$.data")
		if secret == "" && len(v) == 0 {
			v = append(v, errs.Violation{Path: "$.data.webhook.secret", Message: "is required when CreateSubscription is submitted as a command " +
				"(POST /subscriptions generates one when none is given; GET /subscriptions/{id}/secret reads it)"})
		}
		if len(v) > 0 {
			return nil, errs.Invalid("the envelope is invalid", v)
		}
		var sub struct {
			Webhook decide.Webhook `json:"webhook"`
		}
		_ = decide.DecodeData(data, &sub) // checked against the schema
		if _, err := in.p.URLs.CheckURL(ctx, sub.Webhook.URL); err != nil {
			return nil, err
		}
		if err := in.p.Secrets.Create(ctx, tenant, corr, secret); err != nil {
			return nil, errs.Internal(err)
		}
		env.Data = data
	case decide.TypeRotateSubscriptionSecret:
		_, _, fields, err := envelope.SplitObject(env.Data)
		if err != nil {
			return nil, err
		}
		var id, secret string
		_ = json.Unmarshal(fields["id"], &id) // checked against the schema
		if json.Unmarshal(fields["secret"], &secret) != nil || secret == "" {
			return nil, errs.Invalid("the envelope is invalid", []errs.Violation{{Path: "$.data.secret", Message: "is required when RotateSubscriptionSecret " +
				"is submitted as a command (POST /subscriptions/{id}/secret generates one when none is given; GET /subscriptions/{id}/secret reads it)"}})
		}
		if why := secrets.Problem(secret); why != "" {
			return nil, errs.Invalid("the envelope is invalid", []errs.Violation{{Path: "$.data.secret", Message: why}})
		}
		until, err := in.p.Secrets.Rotate(ctx, tenant, id, secret, corr)
		for k := range fields {
			// encoding/json reads keys without regard to case: a "Secret"
			// beside "secret" must not reach the command log either.
			if strings.EqualFold(k, "secret") || strings.EqualFold(k, "previousSecretValidUntil") {
				delete(fields, k)
			}
		}
		switch {
		case errors.Is(err, errs.ErrNotFound):
			// No such subscription: the command is queued without the
			// secret, and rejected (SUBSCRIPTION_NOT_FOUND) as any
			// command for something that does not exist.
		case err != nil:
			return nil, errs.Internal(err)
		default:
			fields["previousSecretValidUntil"] = decide.MustJSON(decide.Stamp(until))
		}
		env.Data = decide.MustJSON(fields)
	default:
		return nil, nil
	}
	return env.Marshal(), nil
}
