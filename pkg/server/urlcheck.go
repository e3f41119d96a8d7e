package server

import (
	"context"
	"net/url"

	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
)

// syntaxURLs checks webhook URLs by their syntax alone
// (decide.WebhookURLProblem): http or https, a host, no user or password,
// no fragment. Where the host points is not asked.
type syntaxURLs struct{}

var _ ops.URLChecker = syntaxURLs{}

// CheckURL implements ops.URLChecker: WEBHOOK_URL_REJECTED with the reason
// in details.reason.
func (syntaxURLs) CheckURL(_ context.Context, raw string) (*url.URL, error) {
	if why := decide.WebhookURLProblem(raw); why != "" {
		return nil, &errs.Error{Code: errs.CodeWebhookURLRejected, Message: "webhook.url is rejected: " + why,
			Details: map[string]any{"reason": why}}
	}
	return url.Parse(raw)
}
