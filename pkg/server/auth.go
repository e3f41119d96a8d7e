package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/manifest"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/openapi"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/throttle"
	"github.com/agentbus/agentbus/pkg/transport/rest"
	"github.com/labstack/echo/v4"
)

// AuthConfig derives the guard's settings from the server config (without
// the signing key, which may come from JetStream).
func (s *Server) authConfig() auth.Config {
	cfg := s.cfg
	l := cfg.AuthLimits
	proxies, _ := throttle.ParseProxies(l.TrustedProxies) // checked by config.Validate
	return auth.Config{
		Method: auth.Method(cfg.Auth.Type), Scheme: cfg.Auth.Scheme, Endpoint: cfg.Endpoint(),
		TokenTTL: cfg.Auth.TokenTTL.D(), BootstrapKey: cfg.Auth.BootstrapKey.Reveal(),
		RatePerSecond: cfg.Limits.Rate.PerSecond, RateBurst: cfg.Limits.Rate.Burst,
		FailurePerSecond: l.Failures.PerSecond, FailureBurst: l.Failures.Burst,
		TokenPerSecond: l.Tokens.PerSecond, TokenBurst: l.Tokens.Burst,
		FailureLogInterval: l.LogInterval.D(), TrustedProxies: proxies,
	}
}

// openGuard builds the authentication guard. Unless the method is none it
// opens the key bucket and keeps a watch on it until wctx ends, so every
// replica sees new and revoked keys as soon as the watch delivers them.
func (s *Server) openGuard(ctx, wctx context.Context) (*auth.Guard, error) {
	acfg := s.authConfig()
	if acfg.Method == auth.MethodNone {
		return auth.NewGuard(acfg, nil, s.log)
	}
	kv, err := s.Conn.KV(ctx, natsjs.KeysBucket(s.cfg.NATS.Prefix))
	if err != nil {
		return nil, err
	}
	keys := auth.NewKeys(kv, s.log)
	if err := keys.Start(wctx); err != nil {
		return nil, fmt.Errorf("load API keys: %w", err)
	}
	if acfg.Method == auth.MethodBearer {
		if k := s.cfg.Auth.TokenSigningKey; k != "" {
			acfg.SigningKey = []byte(k.Reveal())
		} else if acfg.SigningKey, err = auth.SigningKey(ctx, kv); err != nil {
			return nil, err
		}
	}
	g, err := auth.NewGuard(acfg, keys, s.log)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(wctx, g.FlushFailures)
	if acfg.BootstrapKey != "" {
		s.log.Warn("a bootstrap key is configured (auth.bootstrapKey / AGENTBUS_BOOTSTRAP_KEY): it has every scope on every tenant. " +
			"Use it for a first start only, to create real keys (agentbus keys create), then remove it and restart")
	}
	return g, nil
}

// guardREST prepares the REST transport's config for authentication: the
// apiKey query parameter becomes an allowed one.
func guardREST(rc *rest.Config, g *auth.Guard, eps []rest.Endpoint) error {
	if !g.Enabled() {
		return nil
	}
	if g.Method() == auth.MethodAPIKeyQuery {
		for _, op := range eps {
			if slices.ContainsFunc(op.QueryParams(), func(p ops.Param) bool { return p.Name == g.Scheme() }) {
				return fmt.Errorf("auth.scheme %q is a query parameter of %s; choose another name", g.Scheme(), op.ID)
			}
		}
		rc.AllowQuery = append(rc.AllowQuery, g.Scheme())
	}
	return nil
}

// mountAuth guards every route of e but the public ones, and serves the
// public routes beside the manifest: the OpenAPI document and, for bearer,
// the token endpoint. guardedElsewhere are the paths of routes that guard
// themselves as REST does (authentication, tenant, scope: the A2A
// transport's), which the REST guard lets through. It fails when a route
// of e would be guarded by authentication alone.
func (s *Server) mountAuth(e *echo.Echo, g *auth.Guard, eps []rest.Endpoint, rc rest.Config, guardedElsewhere ...string) error {
	pass := append([]string{openapi.Path, auth.TokenPath}, guardedElsewhere...)
	if g.Enabled() {
		e.Use(rest.Authorize(rc, eps, g, pass...))
	}
	multi := rc.MultiTenant
	schemes, security := g.SecuritySchemes()
	oc := openapi.Config{
		Title: "agentbus", Description: "Event-sourced Agent Service Interface on NATS JetStream", Version: Version,
		Endpoint: s.cfg.Endpoint(), MultiTenant: multi, SecuritySchemes: schemes, Security: security,
	}
	th := g.TokenHandler()
	if th != nil {
		oc.TokenPath = auth.TokenPath
		e.POST(auth.TokenPath, echo.WrapHandler(th))
	}
	doc := openapi.Build(oc, eps)
	rest.GetAndHead(e, openapi.Path, func(c echo.Context) error { return c.JSON(http.StatusOK, doc) })
	if !g.Enabled() {
		return nil
	}
	if u := rest.Unguarded(e, rc, eps, pass...); len(u) > 0 {
		return fmt.Errorf("routes neither public nor operations would skip tenant and scope checks: %s", strings.Join(u, ", "))
	}
	return nil
}

// tenantManifest returns the per-tenant manifest function of multi mode.
func tenantManifest(m *manifest.Manifest) func(string) any {
	return func(t string) any { return manifest.ForTenant(m, t) }
}
