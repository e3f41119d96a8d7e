package web

import (
	"net/http"

	"github.com/agentbus/agentbus/pkg/auth"
)

// Authenticator authenticates an HTTP request and applies the caller's
// rate limit; *auth.Guard implements it.
type Authenticator interface {
	// Authenticate returns the caller of r, an UNAUTHENTICATED error, or
	// SERVICE_UNAVAILABLE when the credentials cannot be read.
	Authenticate(r *http.Request) (*auth.Principal, error)
	// Admit applies the caller's rate limit (RATE_LIMITED).
	Admit(p *auth.Principal) error
	// Challenge returns the WWW-Authenticate value for an error, or "".
	Challenge(err error) string
}

var _ Authenticator = (*auth.Guard)(nil)

// Authenticate is the first step of every HTTP request that needs a
// caller: the caller of r, admitted under its rate limit. A request that
// fails authentication gets g's WWW-Authenticate challenge, and its
// connection is closed after the answer rather than kept for the next
// guess (h is the response's header); the error is the one to answer.
func Authenticate(g Authenticator, h http.Header, r *http.Request) (*auth.Principal, error) {
	p, err := g.Authenticate(r)
	if err != nil {
		if ch := g.Challenge(err); ch != "" {
			h.Set("WWW-Authenticate", ch)
		}
		h.Set("Connection", "close")
		return nil, err
	}
	if err := g.Admit(p); err != nil {
		return nil, err
	}
	return p, nil
}
