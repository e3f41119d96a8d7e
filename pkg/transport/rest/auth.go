package rest

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"sort"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/web"
	"github.com/labstack/echo/v4"
)

// Guard is what the REST transport needs of authentication; *auth.Guard
// implements it.
type Guard interface {
	web.Authenticator
	// StillValid reports whether a credential authenticated earlier
	// still holds (UNAUTHENTICATED once revoked or expired).
	StillValid(ctx context.Context, p *auth.Principal) error
}

var _ Guard = (*auth.Guard)(nil)

// authKey is where Authorize leaves what it found of a request in the
// Echo context: the caller and, on an operation's route, the call the
// door admitted.
const authKey = "agentbus.auth"

type authorized struct {
	caller ops.Caller
	call   *ops.Call
}

// Caller returns the caller Authorize authenticated for c's request, or
// the zero ops.Caller when none was asked for (auth none): a session
// transport (Sessions) admits each operation it runs for it (ops.Admit).
func Caller(c echo.Context) ops.Caller {
	a, _ := c.Get(authKey).(authorized)
	return a.caller
}

// admitted returns the call Authorize admitted for c's request to ep, or,
// without it (auth none), the call the door admits for an anonymous
// caller once the request is read (only a switched-off operation is
// refused then).
func admitted(c echo.Context, tenant string, ep Endpoint) (*ops.Call, error) {
	a, _ := c.Get(authKey).(authorized)
	if a.call != nil && a.call.Op().ID == ep.ID && a.call.Tenant() == tenant {
		return a.call, nil
	}
	return ops.Admit(a.caller.Via("rest"), tenant, ep.Operation)
}

// Authorize returns the middleware that guards every request, to a known
// route or not, except the public routes: the discovery manifests and the
// paths in public (route paths as registered, e.g. "/openapi.json").
// Install it with Use on the *echo.Echo that New returns, not on a group:
// Echo's group middleware needs a catch-all route, which would answer a
// wrong method with 404 instead of 405. In order:
// authenticate (401), rate limit per credential
// (429 with Retry-After), then, for an operation route, the door's checks
// (ops.Admit): the addressed tenant must be one of the credential's (403),
// the operation must be switched on (422 CAPABILITY_NOT_SUPPORTED) and the
// credential must carry the operation's scope (403); the handler runs the
// call Admit let in. In multi-tenant mode an invalid tenant id
// is refused (400 VALIDATION_FAILED, as Tenant does) before it is checked
// against the credential. A request to no route is answered 404 or 405
// only once authenticated. A route of cfg.Sessions (a session transport's,
// such as MCP) goes through the tenant check alone (ops.Caller.Enter);
// its transport admits each operation it runs (Caller).
func Authorize(cfg Config, eps []Endpoint, g Guard, public ...string) echo.MiddlewareFunc {
	open, byRoute := guardedRoutes(cfg, eps, public)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if open[c.Path()] {
				return next(c)
			}
			req := c.Request()
			p, err := web.Authenticate(g, c.Response().Header(), req)
			if err != nil {
				return err
			}
			caller := web.Caller(g, p)
			c.Set(authKey, authorized{caller: caller})
			tenant := func() (string, error) {
				if !cfg.MultiTenant {
					return envelope.DefaultTenant, nil
				}
				return web.TenantParam(c)
			}
			if slices.Contains(cfg.Sessions, c.Path()) {
				t, err := tenant()
				if err != nil {
					return err
				}
				if err := caller.Enter(t); err != nil {
					return err
				}
				return next(c)
			}
			group, ok := byRoute[req.Method+" "+c.Path()]
			if !ok {
				return next(c)
			}
			q, _ := url.ParseQuery(req.URL.RawQuery) // what it cannot read, the handler refuses
			op, ok := pick(group, q)
			if !ok {
				return next(c)
			}
			t, err := tenant()
			if err != nil {
				return err
			}
			call, err := ops.Admit(caller.Via("rest"), t, op.Operation)
			if err != nil {
				// A scope the credential lacks is said in its challenge.
				if ch := g.Challenge(err); ch != "" {
					c.Response().Header().Set("WWW-Authenticate", ch)
				}
				return err
			}
			c.Set(authKey, authorized{caller: caller, call: call})
			return next(c)
		}
	}
}

// guardedRoutes returns the public route paths and the endpoints by
// "METHOD path" as Echo reports them (c.Path()).
func guardedRoutes(cfg Config, eps []Endpoint, public []string) (map[string]bool, map[string][]Endpoint) {
	open := map[string]bool{ManifestPath: true, "/:tenantId" + ManifestPath: true}
	for _, p := range public {
		open[p] = true
	}
	prefix := ""
	if cfg.MultiTenant {
		prefix = "/:tenantId"
	}
	byRoute := make(map[string][]Endpoint, len(eps))
	for _, group := range routeGroups(eps) {
		r := group[0].Route
		byRoute[r.Method+" "+prefix+echoPath(r.Path)] = group
		if r.Method == http.MethodGet { // New serves HEAD beside every GET
			byRoute[http.MethodHead+" "+prefix+echoPath(r.Path)] = group
		}
	}
	return open, byRoute
}

// Unguarded returns the routes of e, as "METHOD path", that Authorize with
// the same arguments would let through on authentication alone: neither
// public nor an operation's nor a session transport's (cfg.Sessions), so
// without tenant and scope checks. A server refuses to start with any (a
// route must be added as an operation).
func Unguarded(e *echo.Echo, cfg Config, eps []Endpoint, public ...string) []string {
	open, byRoute := guardedRoutes(cfg, eps, public)
	var out []string
	for _, r := range e.Routes() {
		if _, ok := byRoute[r.Method+" "+r.Path]; !ok && !open[r.Path] && !slices.Contains(cfg.Sessions, r.Path) {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	sort.Strings(out)
	return out
}
