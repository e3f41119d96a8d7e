// Package rest serves the operations table over HTTP with Echo: one route
// per operation, every error in the spec's error body.
package rest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/web"
	"github.com/labstack/echo/v4"
)

// Config tunes the REST transport.
type Config struct {
	// MultiTenant puts every resource route under /{tenantId}.
	MultiTenant bool
	// BodyLimit caps request bodies in bytes (default 1 MiB).
	BodyLimit int64
	// Manifest is served at /.well-known/agentproto.
	Manifest any
	// TenantManifest, in multi-tenant mode, is served (for an existing
	// tenant) at /{tenantId}/.well-known/agentproto, without credentials.
	TenantManifest func(tenant string) any
	// HideTenants serves TenantManifest for every well-formed tenant id,
	// existing or not, so that the public route does not tell who exists.
	// For when credentials are required: otherwise any route tells.
	HideTenants bool
	// Tenants, when set, decides whether a tenant exists (multi-tenant mode).
	Tenants func(ctx context.Context, tenant string) bool
	// AllowQuery names query parameters any route accepts and no
	// operation sees (e.g. an API key, read by the middleware).
	AllowQuery []string
	// Endpoint is rest.endpoint; Location headers are absolute on it.
	Endpoint string
	// Hosts, when not nil, are the host names (lower case, no port) a
	// request's Host may name; an IP address and no Host at all are
	// always taken. Any other is refused 403 FORBIDDEN on every route:
	// for a server without authentication, which a page of another site
	// must not reach through a name of its own that it points at
	// agentbus's address (DNS rebinding).
	Hosts []string
	// StreamWriteTimeout bounds each write of a live stream (default
	// 30s): a reader that stops reading is closed.
	StreamWriteTimeout time.Duration
	// Stop, when it ends, ends the live streams (at shutdown, when
	// http.Server.Shutdown would otherwise wait for them).
	Stop context.Context
	// Sessions are the route paths, as registered on the Echo (e.g.
	// "/mcp", "/:tenantId/mcp"), of session transports served beside the
	// operations: Authorize authenticates, rate limits and checks the
	// tenant of their requests as an operation's, and leaves the scope of
	// each operation they run to them.
	Sessions []string
}

// ManifestPath is where the discovery manifest is served, relative to the
// endpoint (and, in multi-tenant mode, to /{tenantId} for a tenant's).
const ManifestPath = "/.well-known/agentproto"

// New returns the HTTP handler for the endpoints (Bind).
func New(cfg Config, eps []Endpoint, log *slog.Logger) *echo.Echo {
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = 1 << 20
	}
	if cfg.StreamWriteTimeout <= 0 {
		cfg.StreamWriteTimeout = 30 * time.Second
	}
	if cfg.Stop == nil {
		cfg.Stop = context.Background()
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	var resources map[string]bool // first path segments of the operations
	if cfg.MultiTenant {
		resources = map[string]bool{}
		for _, op := range eps {
			first, _, _ := strings.Cut(strings.TrimPrefix(op.Path, "/"), "/")
			resources[first] = true
		}
	}
	e.HTTPErrorHandler = errorHandler(log, resources)
	if cfg.Hosts != nil {
		e.Pre(checkHost(cfg.Hosts))
	}
	get := GetAndHead[*echo.Group]
	root := e.Group("")
	get(root, ManifestPath, func(c echo.Context) error {
		return c.JSON(http.StatusOK, cfg.Manifest)
	})
	if cfg.MultiTenant && cfg.TenantManifest != nil {
		get(root, "/:tenantId"+ManifestPath, func(c echo.Context) error {
			t, err := web.TenantParam(c)
			if err == nil && !cfg.HideTenants {
				err = tenantExists(c, cfg, t)
			}
			if err != nil {
				return err
			}
			return c.JSON(http.StatusOK, cfg.TenantManifest(t))
		})
	}
	base := root
	if cfg.MultiTenant {
		base = e.Group("/:tenantId")
	}
	for _, group := range routeGroups(eps) {
		h := handler(cfg, group)
		r := group[0].Route
		if r.Method == http.MethodGet {
			get(base, echoPath(r.Path), h)
			continue
		}
		base.Add(r.Method, echoPath(r.Path), h)
	}
	return e
}

// routeGroups groups endpoints by method and path, in the order they come.
func routeGroups(eps []Endpoint) [][]Endpoint {
	var out [][]Endpoint
	at := map[string]int{}
	for _, ep := range eps {
		k := ep.Method + " " + ep.Path
		if i, ok := at[k]; ok {
			out[i] = append(out[i], ep)
			continue
		}
		at[k] = len(out)
		out = append(out, []Endpoint{ep})
	}
	return out
}

// pick returns the endpoint of a route's group that a query selects: the
// one whose Select it carries, else the one without Select.
func pick(group []Endpoint, q url.Values) (Endpoint, bool) {
	var def *Endpoint
	for i, ep := range group {
		if ep.Select[0] == "" {
			def = &group[i]
			continue
		}
		if v := q[ep.Select[0]]; len(v) > 0 && v[0] == ep.Select[1] {
			return ep, true
		}
	}
	if def == nil {
		return Endpoint{}, false
	}
	return *def, true
}

// restOfPath reports whether the request's path has more segments than
// the route Echo matched it to: Echo lets a route's last parameter take the
// rest of the path (/things/{id} matches /things/a/b), and no route has
// such a path.
func restOfPath(c echo.Context) bool {
	p := c.Request().URL.RawPath // what Echo routes on, when set
	if p == "" {
		p = c.Request().URL.Path
	}
	return strings.Count(p, "/") > strings.Count(c.Path(), "/")
}

// GetAndHead serves h at path for GET and for HEAD, as HTTP asks of every
// GET route (net/http sends no body to a HEAD request).
func GetAndHead[R interface {
	GET(string, echo.HandlerFunc, ...echo.MiddlewareFunc) *echo.Route
	HEAD(string, echo.HandlerFunc, ...echo.MiddlewareFunc) *echo.Route
}](r R, path string, h echo.HandlerFunc) {
	r.GET(path, h)
	r.HEAD(path, h)
}

func echoPath(p string) string {
	return strings.NewReplacer("{", ":", "}", "").Replace(p)
}

// Tenant returns the tenant a request addresses, checked.
func Tenant(c echo.Context, cfg Config) (string, error) {
	if !cfg.MultiTenant {
		return envelope.DefaultTenant, nil
	}
	t, err := web.TenantParam(c)
	if err != nil {
		return "", err
	}
	return t, tenantExists(c, cfg, t)
}

// tenantExists returns TENANT_NOT_FOUND unless tenant t exists.
func tenantExists(c echo.Context, cfg Config, t string) error {
	if cfg.Tenants != nil && !cfg.Tenants(c.Request().Context(), t) {
		return errs.New(errs.CodeTenantNotFound, "tenant %q does not exist", t)
	}
	return nil
}

// queryRules says, for an endpoint, which query parameters it takes and
// whether each may repeat, and which of them (cfg.AllowQuery) it does not
// see.
type queryRules struct {
	repeats map[string]bool
	hidden  []string
}

func rulesOf(cfg Config, ep Endpoint) queryRules {
	q := queryRules{repeats: map[string]bool{}}
	for _, p := range ep.QueryParams() {
		q.repeats[p.Name] = p.Repeated
	}
	for _, p := range cfg.AllowQuery {
		if _, ok := q.repeats[p]; !ok {
			q.repeats[p] = false
			q.hidden = append(q.hidden, p)
		}
	}
	return q
}

func handler(cfg Config, group []Endpoint) echo.HandlerFunc {
	rules := make([]queryRules, len(group))
	for i, ep := range group {
		rules[i] = rulesOf(cfg, ep)
	}
	return func(c echo.Context) error {
		req := c.Request()
		if restOfPath(c) {
			return noRoute(req)
		}
		tenant, err := Tenant(c, cfg)
		if err != nil {
			return err
		}
		query := url.Values{}
		if req.URL.RawQuery != "" {
			// Not req.URL.Query(), which drops what it cannot read: a
			// filter written with a bad escape would silently be none.
			if query, err = url.ParseQuery(req.URL.RawQuery); err != nil {
				return errs.Invalid("invalid query parameters", []errs.Violation{{Path: "query", Message: "not a valid URL query: " + err.Error()}})
			}
		}
		ep, ok := pick(group, query)
		if !ok {
			return noRoute(req)
		}
		rule := rules[slices.IndexFunc(group, func(g Endpoint) bool { return g.ID == ep.ID })]
		var bad []errs.Violation
		for k, vs := range query {
			switch may, ok := rule.repeats[k]; {
			case !ok:
				bad = append(bad, errs.Violation{Path: errs.Clip(k), Message: "unknown query parameter"})
			case len(vs) > 1 && !may:
				bad = append(bad, errs.Violation{Path: errs.Clip(k), Message: "given more than once; it takes one value"})
			}
		}
		if len(bad) > 0 {
			slices.SortFunc(bad, func(a, b errs.Violation) int { return strings.Compare(a.Path, b.Path) })
			return errs.Invalid("invalid query parameters", bad)
		}
		for _, p := range rule.hidden {
			delete(query, p)
		}
		r := &ops.Request{Params: query}
		for _, name := range c.ParamNames() {
			if name != "tenantId" {
				v, err := web.PathParam(c, name)
				if err != nil {
					return err
				}
				r.Params[name] = []string{v}
			}
		}
		if ep.Body != nil {
			if r.Body, err = readBody(req, cfg.BodyLimit); err != nil {
				return err
			}
		} else if err := noBody(req); err != nil {
			return err
		}
		call, err := admitted(c, tenant, ep)
		if err != nil {
			return err
		}
		if ep.Stream != nil && wantsStream(req) {
			return serveStream(c, cfg, call, r)
		}
		res, err := call.Invoke(req.Context(), r)
		if err != nil {
			return err
		}
		if res.Location != "" {
			loc := res.Location
			if cfg.MultiTenant {
				loc = "/" + tenant + loc
			}
			loc = cfg.Endpoint + loc
			c.Response().Header().Set("Location", loc)
		}
		if res.Private {
			c.Response().Header().Set("Cache-Control", "no-store")
		}
		status := Status(res.Outcome)
		switch {
		case status == http.StatusNoContent:
			return c.NoContent(status)
		case res.Raw != nil:
			return c.Blob(status, res.ContentType, res.Raw)
		default:
			return c.JSON(status, res.Body)
		}
	}
}

// readBody enforces the media type and the size limit.
func readBody(req *http.Request, limit int64) ([]byte, error) {
	if err := web.JSONMediaType(req.Header.Get("Content-Type")); err != nil {
		return nil, err
	}
	if req.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	n := req.ContentLength
	if n > 0 && n <= maxUpfrontBody {
		// A small declared length sizes the buffer once (net/http
		// enforces it).
		body := make([]byte, n)
		if _, err := io.ReadFull(req.Body, body); err != nil {
			return nil, unreadable()
		}
		return body, nil
	}
	// A large declared length is not trusted with an allocation before
	// the bytes arrive: a slow sender could otherwise hold up to the limit
	// per request. The buffer starts at maxUpfrontBody and grows as the
	// body is read.
	var buf bytes.Buffer
	buf.Grow(int(min(max(n, 512), maxUpfrontBody)))
	if _, err := buf.ReadFrom(io.LimitReader(req.Body, limit+1)); err != nil {
		return nil, unreadable()
	}
	if int64(buf.Len()) > limit {
		return nil, tooLarge(limit)
	}
	if n > 0 && int64(buf.Len()) != n {
		return nil, unreadable() // shorter than declared
	}
	return buf.Bytes(), nil
}

// noBody checks the request of a route that takes no body: it may have
// none, or a JSON one (which is not read). A body of another media type,
// or one with none named, is UNSUPPORTED_MEDIA_TYPE — even an empty one
// that names a form's media type, as a cross-site HTML form sends: such a
// request must not act.
func noBody(req *http.Request) error {
	if ct := req.Header.Get("Content-Type"); ct != "" {
		return web.JSONMediaType(ct)
	}
	if req.ContentLength != 0 { // a length, or a chunked body
		return errs.New(errs.CodeUnsupportedMediaType, "a request body must be application/json (got a body without Content-Type)")
	}
	return nil
}

// maxUpfrontBody is the most readBody allocates before reading.
const maxUpfrontBody = 64 << 10

func unreadable() error {
	return errs.New(errs.CodeInvalidRequest, "the request body could not be read")
}

func tooLarge(limit int64) error {
	e := errs.New(errs.CodePayloadTooLarge, "the request body is larger than %d bytes", limit)
	e.Details = map[string]any{"limit": limit}
	return e
}

// noRoute is ROUTE_NOT_FOUND for req.
func noRoute(req *http.Request) *errs.Error {
	return errs.New(errs.CodeRouteNotFound, "no route %s %s", errs.Clip(req.Method), errs.Clip(req.URL.Path))
}

// errorHandler answers every error with the spec's error body. resources,
// in multi-tenant mode, are the first segments of the operations' paths:
// a route not found that starts with one is missing its tenant.
func errorHandler(log *slog.Logger, resources map[string]bool) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		if he := (*echo.HTTPError)(nil); errors.As(err, &he) {
			err = fromEcho(he, c, resources)
		}
		if clientGone(c.Request()) {
			// Nobody is there to answer; whatever failed, it failed
			// because the caller left (its context was cancelled).
			log.Debug("client disconnected before its answer", "method", c.Request().Method, "path", c.Path(), "err", err)
			return
		}
		e := errs.Edge(log, err, "request failed", "method", c.Request().Method, "path", c.Path())
		status := errs.StatusOf(e.Code)
		if ra, ok := e.RetryAfter(); ok { // 429, 503
			c.Response().Header().Set("Retry-After", ra)
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = c.JSON(status, errs.BodyOf(e))
	}
}

// clientGone reports whether the client of req has gone: net/http
// cancels a request's context when its connection closes (or, in HTTP/2,
// its stream is reset) while the handler runs.
func clientGone(req *http.Request) bool {
	return errors.Is(req.Context().Err(), context.Canceled)
}

func fromEcho(he *echo.HTTPError, c echo.Context, resources map[string]bool) *errs.Error {
	switch he.Code {
	case http.StatusNotFound:
		return routeNotFound(c.Request(), resources)
	case http.StatusMethodNotAllowed:
		if restOfPath(c) { // no route has this path, whatever the method
			c.Response().Header().Del(echo.HeaderAllow)
			return routeNotFound(c.Request(), resources)
		}
		return errs.New(errs.CodeMethodNotAllowed, "method %s is not allowed on %s", errs.Clip(c.Request().Method), errs.Clip(c.Request().URL.Path))
	case http.StatusRequestEntityTooLarge:
		return errs.New(errs.CodePayloadTooLarge, "the request body is too large")
	case http.StatusUnsupportedMediaType:
		return errs.New(errs.CodeUnsupportedMediaType, "unsupported media type")
	case http.StatusUnauthorized:
		return errs.New(errs.CodeUnauthenticated, "authentication required")
	}
	if he.Code >= 500 {
		return errs.Internal(he)
	}
	return errs.New(errs.CodeInvalidRequest, "%v", he.Message)
}

// routeNotFound is the ROUTE_NOT_FOUND error of req. When its path starts
// with one of resources (multi-tenant mode), it was meant for a tenant:
// the message and the details name the /{tenantId} prefix.
func routeNotFound(req *http.Request, resources map[string]bool) *errs.Error {
	p := errs.Clip(req.URL.Path)
	e := noRoute(req)
	if first, _, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/"); resources[first] {
		e.Message += ": in multi-tenant mode every resource route starts with /{tenantId}, e.g. " + errs.Clip(req.Method) + " /acme" + p
		e.Details = map[string]any{"tenancy": "multi", "route": "/{tenantId}" + p}
	}
	return e
}
