// Package a2a serves the operations table over the Agent2Agent protocol
// (A2A 1.0 and 0.3 side by side) on github.com/a2aproject/a2a-go/v2: the
// SDK does the protocol (JSON-RPC, HTTP+JSON and gRPC bindings, the 0.3
// compatibility handlers, server-sent events, the agent card's two
// shapes); this package decodes a message, calls an operation and maps the
// result. The gRPC binding (GRPCHandler) shares the HTTP listener.
//
// A task is a command. A message whose data part is a command envelope, or
// a typed skill's data ({"skill": "<CommandType>", "data": {...}}), is
// submitted as POST /commands submits it, and the task's id is the
// command's correlation id; each event the command caused is an artifact
// whose data part is the event envelope; the task is completed once the
// command is processed, and failed when it is rejected (CommandRejected).
// Other operations are skills answered with a message: {"skill":
// "<operationId>", "input": {...}} (the operation's InputSchema).
//
// Nothing of a task is kept in memory: its view is built from the
// command's trace (its receipt and its events in JetStream) whenever it
// is asked for, so a task is read, and followed, after a restart and from
// any replica. For that the package implements a2asrv.RequestHandler
// itself rather than the SDK's default handler, whose executions, event
// queues and task ids live in one process.
package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/push"
	"github.com/agentbus/agentbus/pkg/transport/a2a/card"
	"github.com/agentbus/agentbus/pkg/transport/web"
	"github.com/labstack/echo/v4"
)

// Paths of the A2A endpoints, relative to the endpoint (and, in
// multi-tenant mode, to /{tenantId}).
const (
	CardPath       = a2asrv.WellKnownAgentCardPath // the agent card, public
	JSONRPCPath    = "/a2a"                        // A2A 1.0, JSON-RPC
	RESTPath       = "/a2a/rest"                   // A2A 1.0, HTTP+JSON
	JSONRPCPathV03 = "/a2a/v0.3"                   // A2A 0.3, JSON-RPC
	RESTPathV03    = "/a2a/v0.3/rest"              // A2A 0.3, HTTP+JSON
)

// Guard is what the A2A transport needs of authentication; *auth.Guard
// implements it.
type Guard interface {
	web.Authenticator
	// StillValid reports whether a credential authenticated earlier
	// still holds (UNAUTHENTICATED once revoked or expired).
	StillValid(ctx context.Context, p *auth.Principal) error
	// Enabled reports whether callers must present credentials.
	Enabled() bool
	// Method and Scheme say how credentials are sent, for the card.
	Method() auth.Method
	Scheme() string
}

var _ Guard = (*auth.Guard)(nil)

// Surface is what the A2A transport needs of the operations; *ops.Surface
// implements it.
type Surface interface {
	// Operations returns the operations table.
	Operations() []ops.Operation
	// CommandEntries returns the command types, each with its versions
	// oldest first; SchemaURL the absolute URL of an entry's schema.
	CommandEntries() [][]*catalog.Entry
	SchemaURL(tenant string, kind catalog.Kind, e *catalog.Entry) string
	// PrepareTyped completes a typed command's envelope.
	PrepareTyped(tenant string, c ops.TypedCommand) (*ops.PreparedCommand, error)
	// CommandTrace returns a command's trace once the receipts have
	// caught up.
	CommandTrace(ctx context.Context, caller, tenant, corr string) (*ops.Trace, error)
	// FollowCommands opens the bounded feed of the events of the
	// tenant's commands it watches, as they are published (nil: none).
	FollowCommands(tenant string) *push.Feed
	// Follow runs a live stream's loop on the one credential rule (its
	// error UNAUTHENTICATED once the credential no longer holds).
	Follow(ctx context.Context, cred func() ops.Credential, f ops.Follower) error
}

var _ Surface = (*ops.Surface)(nil)

// Config tunes the A2A transport.
type Config struct {
	// Name, Description and Version describe agentbus on the card.
	Name, Description, Version string
	// Endpoint is the public base URL (rest.endpoint): the card's
	// interface URLs are absolute on it.
	Endpoint string
	// MultiTenant serves every route under /{tenantId}.
	MultiTenant bool
	// Tenants, when set, decides whether a tenant exists (multi-tenant
	// mode): the card of one that does not is 404 TENANT_NOT_FOUND unless
	// HideTenants, and so is every guarded route.
	Tenants func(ctx context.Context, tenant string) bool
	// HideTenants serves the card of every well-formed tenant id, so that
	// the public route does not tell who exists.
	HideTenants bool
	// TokenURL is the token endpoint of the bearer method (for the card's
	// OAuth2 scheme).
	TokenURL string
	// BodyLimit caps request bodies in bytes (default 1 MiB).
	BodyLimit int64
	// WaitTimeout bounds how long a non-streaming message waits for its
	// command's outcome before answering the task as it stands (default
	// 5s).
	WaitTimeout time.Duration
	// Poll is how often a stream rereads its command's trace besides the
	// events pushed to it, for what no event tells (an agent taking the
	// command); default 2s.
	Poll time.Duration
	// KeepAlive, when positive, is how often a quiet stream sends a
	// keep-alive comment.
	KeepAlive time.Duration
	// StreamWriteTimeout bounds each write of a stream (default 30s): a
	// reader that stops reading is closed.
	StreamWriteTimeout time.Duration
	// Stop, when it ends, ends the streams (at shutdown).
	Stop context.Context
	// GRPC says that the server routes gRPC calls to GRPCHandler: the
	// card then lists the gRPC interfaces, at the endpoint's host:port.
	GRPC bool
}

func (c *Config) defaults() {
	if c.BodyLimit <= 0 {
		c.BodyLimit = 1 << 20
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = 5 * time.Second
	}
	if c.Poll <= 0 {
		c.Poll = 2 * time.Second
	}
	if c.StreamWriteTimeout <= 0 {
		c.StreamWriteTimeout = 30 * time.Second
	}
	if c.Stop == nil {
		c.Stop = context.Background()
	}
}

// Transport is the A2A transport. Safe for concurrent use.
type Transport struct {
	cfg   Config
	ops   Surface
	guard Guard
	log   *slog.Logger
	table map[string]ops.Operation // by id
	h     *handler
	cards *card.Cards
}

// New returns the A2A transport of the operations of surface.
func New(cfg Config, surface Surface, g Guard, log *slog.Logger) *Transport {
	cfg.defaults()
	t := &Transport{cfg: cfg, ops: surface, guard: g, log: log, table: map[string]ops.Operation{}}
	for _, op := range surface.Operations() {
		t.table[op.ID] = op
	}
	t.h = &handler{t: t}
	t.cards = card.New(card.Config{Name: cfg.Name, Description: cfg.Description, Version: cfg.Version,
		Endpoint: cfg.Endpoint, MultiTenant: cfg.MultiTenant, TokenURL: cfg.TokenURL, GRPC: cfg.GRPC,
		JSONRPC: JSONRPCPath, REST: RESTPath, JSONRPCV03: JSONRPCPathV03, RESTV03: RESTPathV03}, surface, g)
	return t
}

// SkillSchemasExtension is the URI of the card extension whose params
// hold each skill's input schema by skill id (card.SkillSchemasExtension).
const SkillSchemasExtension = card.SkillSchemasExtension

// Base returns the public base URL of tenant's routes.
func (t *Transport) Base(tenant string) string { return t.cards.Base(tenant) }

// cardTenant is the tenant of the card a request asks for: the one its
// route addresses (cardRoute), else the default one.
func cardTenant(ctx context.Context) string {
	if c, _ := ctx.Value(callKey{}).(*call); c != nil {
		return c.tenant
	}
	return envelope.DefaultTenant
}

// Mount serves the A2A routes on e and returns their paths as Echo has
// them. The card is public; every other route authenticates its caller
// as REST does (401, 429), then checks the tenant (400 for an invalid id,
// 403 for a credential without it, 404 TENANT_NOT_FOUND); each skill and
// task method then runs its operation through the door (ops.Admit: switched
// on, scope). The REST guard must let these paths through: they are
// guarded here.
func (t *Transport) Mount(e *echo.Echo) []string {
	prefix := ""
	if t.cfg.MultiTenant {
		prefix = "/:tenantId"
	}
	opts := []a2asrv.TransportOption{}
	if t.cfg.KeepAlive > 0 {
		opts = append(opts, a2asrv.WithTransportKeepAlive(t.cfg.KeepAlive))
	}
	card := a2asrv.NewAgentCardHandler(t.cards.Producer(cardTenant))
	var paths []string
	add := func(methods []string, path string, h echo.HandlerFunc) {
		for _, m := range methods {
			e.Add(m, prefix+path, h)
		}
		paths = append(paths, prefix+path)
	}
	add([]string{http.MethodGet, http.MethodHead, http.MethodOptions}, CardPath, t.cardRoute(card))
	post := []string{http.MethodPost}
	add(post, JSONRPCPath, t.guarded(a2asrv.NewJSONRPCHandler(t.h, opts...), false))
	add(post, JSONRPCPathV03, t.guarded(a2av0.NewJSONRPCHandler(t.h, opts...), false))
	rest := []string{http.MethodGet, http.MethodPost, http.MethodDelete}
	add(rest, RESTPath+"/*", t.guarded(a2asrv.NewRESTHandler(t.h, opts...), true))
	add(rest, RESTPathV03+"/*", t.guarded(a2av0.NewRESTHandler(t.h, opts...), true))
	return paths
}

// cardRoute serves the agent card of the addressed tenant, without
// credentials.
func (t *Transport) cardRoute(card http.Handler) echo.HandlerFunc {
	return func(c echo.Context) error {
		tenant, err := t.tenantOf(c)
		if err != nil {
			return err
		}
		if !t.cfg.HideTenants {
			if err := t.exists(c.Request().Context(), tenant); err != nil {
				return err
			}
		}
		req := c.Request().WithContext(withCall(c.Request().Context(), &call{tenant: tenant}))
		if req.Method == http.MethodHead { // answered as GET, without the body
			req.Method = http.MethodGet
		}
		card.ServeHTTP(c.Response(), req)
		return nil
	}
}

// guarded authenticates, admits and checks the tenant of a request before
// h serves it, with the caller in its context, its body bounded and JSON,
// ended at shutdown. With wildcard, h sees only the path the route's
// wildcard matched (an HTTP+JSON binding routes on it).
func (t *Transport) guarded(h http.Handler, wildcard bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		p, err := web.Authenticate(t.guard, c.Response().Header(), req)
		if err != nil {
			return err
		}
		tenant, err := t.tenantOf(c)
		if err != nil {
			return err
		}
		cl, err := t.enter(req.Context(), p, tenant)
		if err != nil {
			return err
		}
		if req.Method == http.MethodPost || req.ContentLength > 0 {
			if err := web.JSONMediaType(req.Header.Get("Content-Type")); err != nil {
				return err
			}
		}
		req.Body = http.MaxBytesReader(c.Response(), req.Body, t.cfg.BodyLimit)
		if req.Method == http.MethodPost {
			cl.part, cl.problem = readChecked(req, !wildcard)
		}
		ctx, release := t.callContext(req.Context(), cl)
		defer release()
		req = req.WithContext(ctx)
		if wildcard {
			r2 := req.Clone(ctx)
			r2.URL.Path, r2.URL.RawPath = "/"+c.Param("*"), ""
			req = r2
		}
		h.ServeHTTP(&web.StreamWriter{ResponseWriter: c.Response(), Timeout: t.cfg.StreamWriteTimeout}, req)
		return nil
	}
}

// tenantOf returns the tenant a request addresses: the default one, or
// in multi-tenant mode its checked {tenantId}.
func (t *Transport) tenantOf(c echo.Context) (string, error) {
	if !t.cfg.MultiTenant {
		return envelope.DefaultTenant, nil
	}
	return web.TenantParam(c)
}

// exists returns TENANT_NOT_FOUND unless tenant exists.
func (t *Transport) exists(ctx context.Context, tenant string) error {
	if t.cfg.MultiTenant && t.cfg.Tenants != nil && !t.cfg.Tenants(ctx, tenant) {
		return errs.New(errs.CodeTenantNotFound, "tenant %q does not exist", tenant)
	}
	return nil
}

// call is the caller of a request: its tenant, its principal (nil on the
// public card route) and the operations' caller it is (web.Caller).
type call struct {
	tenant string
	p      *auth.Principal
	who    ops.Caller
	// grpc says the call came over the gRPC binding: its errors are
	// gRPC statuses (toA2A).
	grpc bool
	// problem, when set, is what is wrong with the request's body
	// (readChecked): every method answers it.
	problem error
	// part is the JSON text of the one data part of the request's
	// message, as sent (readChecked); nil when it has none, or several,
	// or came over gRPC.
	part json.RawMessage
}

// enter returns the caller of a request of p on tenant, once the door
// lets it address tenant (ops.Caller.Enter) and tenant exists.
func (t *Transport) enter(ctx context.Context, p *auth.Principal, tenant string) (*call, error) {
	who := web.Caller(t.guard, p)
	if err := who.Enter(tenant); err != nil {
		return nil, err
	}
	if err := t.exists(ctx, tenant); err != nil {
		return nil, err
	}
	return &call{tenant: tenant, p: p, who: who}, nil
}

// callContext returns the context a call of cl runs in, cl in it and
// ended at shutdown, and the function that releases it.
func (t *Transport) callContext(ctx context.Context, cl *call) (context.Context, func()) {
	ctx, cancel := context.WithCancel(withCall(ctx, cl))
	stop := context.AfterFunc(t.cfg.Stop, cancel)
	return ctx, func() { stop(); cancel() }
}

// readChecked reads the body of req, which the SDK decodes next, and
// returns what the SDK's decoder would pass over without a word, or fail
// on in its own words: invalid UTF-8 (which it reads as U+FFFD) is
// MALFORMED_JSON, as over REST and MCP; a member name twice in an object
// (it keeps the last) or a number that a float64 does not carry exactly
// (it reads float64, and fails on one beyond float64's range) is
// VALIDATION_FAILED at its path in the body, as the data rules refuse
// them over REST (envelope.DecodeData). The SDK is then handed a body it
// decodes — the same JSON-RPC request (rpc) with empty params, or an
// empty object — so that the method called answers the refusal, in its
// binding's form. Otherwise the body goes to the SDK as it came; a read
// error (a body over the limit) follows the bytes read, and a body that
// is not JSON is the SDK's to answer. part is the JSON text of the one data
// part of the request's message (dataPart), when all is well.
func readChecked(req *http.Request, rpc bool) (part json.RawMessage, problem error) {
	raw, err := io.ReadAll(req.Body)
	rest := io.Reader(bytes.NewReader(raw))
	if err != nil {
		rest = io.MultiReader(rest, errReader{err})
	}
	req.Body = io.NopCloser(rest)
	switch {
	case err != nil:
		return nil, nil
	case !utf8.Valid(raw):
		problem = envelope.MalformedJSON(raw)
	default:
		// One read checks the syntax and the data rules; only a body it
		// does not vouch for is read again, to tell JSON that is not
		// the SDK's to answer from JSON the rules refuse.
		_, v, ok := envelope.DecodeData(raw, "$")
		switch {
		case ok && len(v) == 0:
			return dataPart(raw, rpc), nil
		case !ok && !json.Valid(raw):
			return nil, nil
		case !ok:
			v = envelope.CheckData(raw, "$")
		}
		problem = errs.Invalid("the request body cannot be read exactly as sent", v)
	}
	stand := []byte("{}")
	if rpc {
		var head struct {
			JSONRPC any             `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"` // echoed as sent
			Method  string          `json:"method"`
		}
		_ = json.Unmarshal(raw, &head)
		if !utf8.Valid(head.ID) || !json.Valid(head.ID) {
			head.ID = nil
		}
		stand, _ = json.Marshal(map[string]any{"jsonrpc": head.JSONRPC, "id": head.ID, "method": head.Method, "params": struct{}{}})
	}
	req.Body = io.NopCloser(bytes.NewReader(stand))
	req.ContentLength = int64(len(stand))
	return nil, problem
}

// dataPart returns the JSON text of the one data part of the message of a
// request body, valid JSON (params.message of a JSON-RPC request, message
// of an HTTP+JSON one; a part with a "data" member, in A2A 1.0's form and
// 0.3's alike), or nil when there is none or more than one. It reads the
// body in one decode, matching member names as the SDK's decoder does;
// partText takes the text only when it is the value the SDK found.
func dataPart(raw []byte, rpc bool) json.RawMessage {
	type message struct {
		Parts []struct {
			Data json.RawMessage `json:"data"`
		} `json:"parts"`
	}
	var rest struct {
		Message message `json:"message"`
	}
	var rpcReq struct {
		Params struct {
			Message message `json:"message"`
		} `json:"params"`
	}
	m := &rest.Message
	var body any = &rest
	if rpc {
		m, body = &rpcReq.Params.Message, &rpcReq
	}
	if json.Unmarshal(raw, body) != nil {
		return nil
	}
	var found json.RawMessage
	for _, p := range m.Parts {
		if p.Data != nil {
			if found != nil {
				return nil
			}
			found = p.Data
		}
	}
	return found
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

type callKey struct{}

func withCall(ctx context.Context, c *call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// callOf returns the caller of ctx; a context without one (never on a
// mounted route) is refused as unauthenticated, and a call whose body
// readChecked refused gets that refusal.
func callOf(ctx context.Context) (*call, error) {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil || c.p == nil {
		return nil, errs.New(errs.CodeUnauthenticated, "credentials are required")
	}
	if c.problem != nil {
		return nil, c.problem
	}
	return c, nil
}

// admit is the door's check (ops.Admit) of a call of op by the caller on
// its tenant: the call to run, or why not.
func (c *call) admit(op ops.Operation) (*ops.Call, error) {
	return ops.Admit(c.who.Via("a2a"), c.tenant, op)
}

// caller is the credential id the operations bound reads by.
func (c *call) caller() string { return c.who.ID }
