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
	"github.com/agentbus/agentbus/pkg/transport/a2a"
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
// the token endpoint. guardedElsewhere are the paths of routes the REST
// guard lets through: those that guard themselves as REST does
// (authentication, tenant, scope: the A2A transport's) and the console's
// static files, which hold no data. It fails when a route
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
		Protocols: protocolRoutes(),
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

// protocolRoutes are the MCP and A2A entry points the OpenAPI document
// lists beside the REST operations.
func protocolRoutes() []openapi.ProtocolRoute {
	const stream = "application/json, text/event-stream"
	mcpTag, a2aTag := "mcp", "a2a"
	return []openapi.ProtocolRoute{
		{Method: http.MethodPost, Path: MCPPath, OperationID: "mcpPost", Tag: mcpTag, Request: "application/json", Response: "application/json",
			Summary: "MCP over Streamable HTTP: a JSON-RPC message of a session (initialize opens one); answers in JSON or as " + stream + "."},
		{Method: http.MethodGet, Path: MCPPath, OperationID: "mcpListen", Tag: mcpTag, Response: "text/event-stream",
			Summary: "MCP over Streamable HTTP: the session's stream of server messages (pushed events), with the Mcp-Session-Id header."},
		{Method: http.MethodDelete, Path: MCPPath, OperationID: "mcpEnd", Tag: mcpTag, Response: "application/json",
			Summary: "MCP over Streamable HTTP: ends the session named by the Mcp-Session-Id header."},
		{Method: http.MethodGet, Path: a2a.CardPath, OperationID: "getAgentCard", Tag: a2aTag, Public: true, Response: "application/json",
			Summary: "The A2A agent card: skills, security schemes and the A2A interfaces (JSON-RPC and HTTP+JSON, A2A 1.0 and 0.3); needs no credentials."},
		{Method: http.MethodPost, Path: a2a.JSONRPCPath, OperationID: "a2aJSONRPC", Tag: a2aTag, Request: "application/json", Response: "application/json",
			Summary: "A2A 1.0 over JSON-RPC: send or stream a message (a command becomes a task), get or resubscribe to a task. " +
				"HTTP+JSON is under " + a2a.RESTPath + ", A2A 0.3 under " + a2a.JSONRPCPathV03 + " (the agent card lists them)."},
		{Method: http.MethodPost, Path: a2a.JSONRPCPathV03, OperationID: "a2aJSONRPCv03", Tag: a2aTag, Request: "application/json", Response: "application/json",
			Summary: "A2A 0.3 over JSON-RPC, as " + a2a.JSONRPCPath + "; HTTP+JSON under " + a2a.RESTPathV03 + "."},
	}
}
