package web

import (
	"context"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/ops"
)

// Validator checks again a credential authenticated earlier;
// *auth.Guard implements it.
type Validator interface {
	// StillValid returns UNAUTHENTICATED once p is revoked or expired.
	StillValid(ctx context.Context, p *auth.Principal) error
}

var _ Validator = (*auth.Guard)(nil)

// Caller is the operations' caller (ops.Caller) of a credential g
// authenticated: its id ("" for an anonymous caller), its tenants and
// scopes (auth.Principal.Allow), g's check that it still holds and its
// expiry (a bearer token's). A nil p is the zero Caller (no
// authentication).
func Caller(g Validator, p *auth.Principal) ops.Caller {
	if p == nil {
		return ops.Caller{}
	}
	c := ops.Caller{ID: p.ID,
		Allow: func(tenant string, scope ops.Scope) error { return p.Allow(tenant, auth.Scope(scope)) },
		Valid: func(ctx context.Context) error { return g.StillValid(ctx, p) }, Until: p.Until}
	if p.Kind == auth.KindAnonymous {
		c.ID = ""
	}
	return c
}
