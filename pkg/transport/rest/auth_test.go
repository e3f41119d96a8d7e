package rest_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/rest"
	"github.com/labstack/echo/v4"
)

// fakeGuard authenticates the credential in X-Test as a key bound to the
// tenant of the same name, with the read scope.
type fakeGuard struct{}

func (fakeGuard) Authenticate(r *http.Request) (*auth.Principal, error) {
	t := r.Header.Get("X-Test")
	if t == "" {
		return nil, errs.New(errs.CodeUnauthenticated, "credentials are required")
	}
	return &auth.Principal{ID: "k", Kind: auth.KindKey, Tenants: []string{t}, Scopes: []auth.Scope{auth.ScopeRead}}, nil
}

func (fakeGuard) Admit(*auth.Principal) error                       { return nil }
func (fakeGuard) Challenge(error) string                            { return "" }
func (fakeGuard) StillValid(context.Context, *auth.Principal) error { return nil }

func guarded(t *testing.T, cfg rest.Config) (http.Handler, *[]string) {
	t.Helper()
	var seen []string
	table := []rest.Endpoint{{Route: rest.Route{Method: http.MethodGet, Path: "/things"}, Operation: ops.Operation{ID: "listThings", Scope: "read",
		Handle: func(_ context.Context, r *ops.Request) (*ops.Response, error) {
			seen = append(seen, r.Tenant)
			return &ops.Response{Body: map[string]any{}}, nil
		}}}}
	e := rest.New(cfg, table, slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.Use(rest.Authorize(cfg, table, fakeGuard{}))
	return e, &seen
}

func guardedGet(h http.Handler, target, tenant string) *result {
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if tenant != "" {
		req.Header.Set("X-Test", tenant)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return &result{status: w.Code, header: w.Header(), body: w.Body.Bytes()}
}

// TestAuthorizeTenant: an invalid tenant id is a 400 before the
// credential's tenants are checked, and never echoed in a 403.
func TestAuthorizeTenant(t *testing.T) {
	t.Parallel()
	h, seen := guarded(t, rest.Config{MultiTenant: true,
		Tenants: func(_ context.Context, t string) bool { return t == "acme" || t == "globex" }})
	b := errorBody(t, guardedGet(h, "/Bad!Id/things", "acme"), 400, errs.CodeValidationFailed)
	if p := violationPaths(b); len(p) != 1 || p[0] != "tenantId" || strings.Contains(b.Error.Message, "Bad!Id") {
		t.Errorf("invalid tenant: %+v", b.Error)
	}
	errorBody(t, guardedGet(h, "/Bad!Id/things", ""), 401, errs.CodeUnauthenticated)
	errorBody(t, guardedGet(h, "/globex/things", "acme"), 403, errs.CodeForbidden)
	errorBody(t, guardedGet(h, "/initech/things", "acme"), 403, errs.CodeForbidden)
	if r := guardedGet(h, "/acme/things", "acme"); r.status != 200 {
		t.Fatalf("own tenant: %d %s", r.status, r.body)
	}
	if len(*seen) != 1 || (*seen)[0] != "acme" {
		t.Fatalf("operations ran for %q", *seen)
	}
}

// TestAuthorizeDefaultTenant: single-tenant mode
// authorizes and serves the tenant "default".
func TestAuthorizeDefaultTenant(t *testing.T) {
	t.Parallel()
	h, seen := guarded(t, rest.Config{})
	errorBody(t, guardedGet(h, "/things", "acme"), 403, errs.CodeForbidden)
	if r := guardedGet(h, "/things", "default"); r.status != 200 || len(*seen) != 1 || (*seen)[0] != "default" {
		t.Fatalf("default tenant: %d %s %q", r.status, r.body, *seen)
	}
}

// TestUnguarded: a route that is neither an operation nor public is
// reported (it would get authentication alone); operations, the manifests
// and the public paths are not.
func TestUnguarded(t *testing.T) {
	t.Parallel()
	for _, cfg := range []rest.Config{{}, {MultiTenant: true}} {
		table := []rest.Endpoint{{Route: rest.Route{Method: http.MethodGet, Path: "/things/{id}"}, Operation: ops.Operation{ID: "listThings", Scope: "read",
			Params: []ops.Param{{Name: "id"}},
			Handle: func(context.Context, *ops.Request) (*ops.Response, error) { return nil, nil }}}}
		e := rest.New(cfg, table, slog.New(slog.NewTextHandler(io.Discard, nil)))
		e.GET("/openapi.json", func(echo.Context) error { return nil })
		if u := rest.Unguarded(e, cfg, table, "/openapi.json"); len(u) != 0 {
			t.Errorf("multi %v: %v reported, want none", cfg.MultiTenant, u)
		}
		e.POST("/things/:id", func(echo.Context) error { return nil })
		e.GET("/extra", func(echo.Context) error { return nil })
		u := rest.Unguarded(e, cfg, table, "/openapi.json")
		if want := "GET /extra,POST /things/:id"; strings.Join(u, ",") != want {
			t.Errorf("multi %v: %v reported, want %s", cfg.MultiTenant, u, want)
		}
	}
}

// TestAuthorizeSessionRoute: a session transport's route (Config.Sessions)
// is guarded, not reported by Unguarded: authenticated, its tenant checked
// against the credential, and the caller handed on (Caller) for the
// transport's own scope checks.
func TestAuthorizeSessionRoute(t *testing.T) {
	t.Parallel()
	cfg := rest.Config{MultiTenant: true, Sessions: []string{"/:tenantId/session"}}
	table := []rest.Endpoint{{Route: rest.Route{Method: http.MethodGet, Path: "/things"}, Operation: ops.Operation{ID: "listThings", Scope: "read",
		Handle: func(context.Context, *ops.Request) (*ops.Response, error) {
			return &ops.Response{Body: map[string]any{}}, nil
		}}}}
	e := rest.New(cfg, table, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var callers []string
	e.GET("/:tenantId/session", func(c echo.Context) error {
		callers = append(callers, rest.Caller(c).ID)
		return c.NoContent(http.StatusNoContent)
	})
	e.GET("/:tenantId/other", func(echo.Context) error { return nil })
	if u := rest.Unguarded(e, cfg, table); strings.Join(u, ",") != "GET /:tenantId/other" {
		t.Errorf("unguarded %v, want only the other route", u)
	}
	e.Use(rest.Authorize(cfg, table, fakeGuard{}))
	errorBody(t, guardedGet(e, "/acme/session", ""), 401, errs.CodeUnauthenticated)
	errorBody(t, guardedGet(e, "/acme/session", "globex"), 403, errs.CodeForbidden)
	errorBody(t, guardedGet(e, "/Bad!Id/session", "acme"), 400, errs.CodeValidationFailed)
	if r := guardedGet(e, "/acme/session", "acme"); r.status != http.StatusNoContent || len(callers) != 1 || callers[0] != "k" {
		t.Errorf("own tenant: %d %s, callers %v", r.status, r.body, callers)
	}
}
