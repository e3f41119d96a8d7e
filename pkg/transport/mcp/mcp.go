// Package mcp serves the operations table over the Model Context Protocol
// (Streamable HTTP, stateful sessions, with the official Go SDK): one tool
// per operation, one typed tool per command type of the catalogue, the
// commands' stories and the catalogue's schemas as resources, and the
// events of the commands a session submits or subscribes to pushed to it
// as they are published (notifications/message and
// notifications/resources/updated). It is a transport: it decodes, calls
// an operation through the door (ops.Admit, then ops.Call.Invoke) and
// encodes; authentication happens before it (the caller comes in with its
// tenant checked). It imports nothing of NATS.
package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/push"
	"github.com/agentbus/agentbus/pkg/throttle"
	"github.com/agentbus/agentbus/pkg/transport/web"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Config tunes the MCP transport. Zero values take the defaults noted.
type Config struct {
	// Version is agentbus's, told to clients at initialisation.
	Version string
	// BodyLimit caps a request body in bytes (default 1 MiB).
	BodyLimit int64
	// Sessions bounds the sessions open at once (default 1000);
	// SessionsPerCaller those of one credential (default 20; anonymous
	// callers are held to Sessions only). Past either a new session is
	// refused RATE_LIMITED.
	Sessions, SessionsPerCaller int
	// Watches bounds the commands one session follows (default 100; past
	// it the oldest watch ends); WatchTTL ends a watch that long after it
	// began (default 1h).
	Watches  int
	WatchTTL time.Duration
	// KeepAlive is how often a session is pinged (default 30s); three
	// unanswered pings in a row end it. IdleTimeout ends a session that
	// sent no request that long (default 30m).
	KeepAlive, IdleTimeout time.Duration
	// WriteTimeout bounds each write to a client (default 30s): a client
	// that stops reading loses its stream.
	WriteTimeout time.Duration
	// Stop, when it ends, ends every session (at shutdown, when
	// http.Server.Shutdown would otherwise wait for their streams) and
	// refuses new ones.
	Stop context.Context
}

func (c *Config) defaults() {
	if c.BodyLimit <= 0 {
		c.BodyLimit = 1 << 20
	}
	if c.Sessions <= 0 {
		c.Sessions = 1000
	}
	if c.SessionsPerCaller <= 0 {
		c.SessionsPerCaller = 20
	}
	if c.Watches <= 0 {
		c.Watches = 100
	}
	if c.WatchTTL <= 0 {
		c.WatchTTL = time.Hour
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 30 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Minute
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.Stop == nil {
		c.Stop = context.Background()
	}
}

// Surface is what the transport needs of the operations; *ops.Surface
// implements it.
type Surface interface {
	// Operations returns the operations table.
	Operations() []ops.Operation
	// TypedCommands returns the newest entry of each typed command type.
	TypedCommands() []*catalog.Entry
	// PrepareTyped completes a typed command's envelope.
	PrepareTyped(tenant string, c ops.TypedCommand) (*ops.PreparedCommand, error)
	// FollowCommands opens the bounded feed of the events of the
	// tenant's commands it watches, as they are published (nil: none).
	FollowCommands(tenant string) *push.Feed
	// Follow runs a live stream's loop on the one credential rule (its
	// error UNAUTHENTICATED once the credential no longer holds).
	Follow(ctx context.Context, cred func() ops.Credential, f ops.Follower) error
}

var _ Surface = (*ops.Surface)(nil)

// Caller is who sends a request to the endpoint, as authentication found
// it.
type Caller struct {
	// Tenant is the tenant the endpoint addresses, checked against the
	// credential (ops.Caller.Enter).
	Tenant string
	// Caller is the credential: the zero ops.Caller without
	// authentication. A session answers only requests of the credential
	// (ID) and tenant that opened it, admits each operation it runs
	// (ops.Admit) for the credential as its latest request shows it, and
	// pushes on ops.Surface.Follow with that credential, ending once it no
	// longer holds.
	ops.Caller
}

// Transport is the MCP endpoint: serve every request of /mcp (or
// /{tenantId}/mcp) with ServeHTTP. Safe for concurrent use.
type Transport struct {
	cfg     Config
	surface Surface
	ops     map[string]ops.Operation
	table   []ops.Operation
	log     *slog.Logger
	h       *sdk.StreamableHTTPHandler
	// bare answers the SDK's questions (protocol versions) for requests
	// of existing sessions, each of which has a server of its own.
	bare *sdk.Server

	mu       sync.Mutex
	tools    []tool              // what every session offers; CatalogChanged replaces it
	sessions map[string]*session // by session id, once the SDK named it
	stopped  bool
	// open counts the sessions open or being opened.
	open *throttle.Slots
}

// New returns the transport of the operations of s, pushing the events
// s hands out. The tools are built from the table and the catalogue;
// CatalogChanged rebuilds the typed ones after a catalogue reload. It
// fails for a typed command whose schema is not an object schema.
func New(cfg Config, s Surface, log *slog.Logger) (*Transport, error) {
	cfg.defaults()
	t := &Transport{cfg: cfg, surface: s, ops: map[string]ops.Operation{}, log: log,
		sessions: map[string]*session{}, open: throttle.NewSlots(cfg.Sessions, cfg.SessionsPerCaller)}
	t.table = s.Operations()
	for _, op := range t.table {
		t.ops[op.ID] = op
	}
	var err error
	if t.tools, err = buildTools(t.table, s.TypedCommands()); err != nil {
		return nil, err
	}
	t.bare = sdk.NewServer(t.implementation(), nil)
	t.h = sdk.NewStreamableHTTPHandler(t.server, &sdk.StreamableHTTPOptions{
		SessionTimeout:      cfg.IdleTimeout,
		MaxRequestBodyBytes: cfg.BodyLimit,
		// The REST transport's Host check (DNS rebinding) guards the
		// endpoint when no credentials are required, with agentbus's own
		// names; the SDK's would refuse a public name served on loopback
		// behind a proxy.
		DisableLocalhostProtection: true,
	})
	context.AfterFunc(cfg.Stop, t.stop)
	return t, nil
}

func (t *Transport) implementation() *sdk.Implementation {
	return &sdk.Implementation{Name: "agentbus", Title: "agentbus", Version: t.cfg.Version}
}

// serverKey carries a new session's server to t.server.
type serverKey struct{}

// server is the SDK's getServer: the server made for a new session, or the
// bare one.
func (t *Transport) server(r *http.Request) *sdk.Server {
	if s, ok := r.Context().Value(serverKey{}).(*sdk.Server); ok {
		return s
	}
	return t.bare
}

// SessionHeader names the session of a request (Streamable HTTP).
const SessionHeader = "Mcp-Session-Id"

// ServeHTTP serves one request of caller to the endpoint. It returns an
// error, before writing anything, when a new session is refused:
// RATE_LIMITED past the bounds on sessions, SERVICE_UNAVAILABLE once
// stopping. A request naming a session that caller did not open (another
// credential's or another tenant's) is answered 404 as an unknown session
// is. Everything else is the SDK's to answer.
func (t *Transport) ServeHTTP(w http.ResponseWriter, r *http.Request, c Caller) error {
	w = &web.StreamWriter{ResponseWriter: w, Timeout: t.cfg.WriteTimeout}
	if id := r.Header.Get(SessionHeader); id != "" {
		t.mu.Lock()
		s := t.sessions[id]
		t.mu.Unlock()
		if s == nil || s.tenant != c.Tenant || s.caller != c.ID {
			http.Error(w, "session not found", http.StatusNotFound) // the SDK's own answer
			return nil
		}
		s.latest.Store(&c.Caller) // the credential as this request shows it
		t.h.ServeHTTP(w, r)
		return nil
	}
	if r.Method != http.MethodPost || !t.initializes(r) {
		// The SDK refuses it, or answers it on the bare server without a
		// session (a probe of the stateless protocol, server/discover).
		t.h.ServeHTTP(w, r)
		return nil
	}
	if err := t.enter(c.ID); err != nil {
		return err
	}
	s := t.newSession(c)
	srv := s.newServer()
	dw := w.(*web.StreamWriter)
	dw.OnHeader = func(h http.Header) {
		if id := h.Get(SessionHeader); id != "" && s.id == "" {
			// Bound before the answer leaves, so that the client's next
			// request finds it.
			s.id = id
			t.mu.Lock()
			t.sessions[id] = s
			t.mu.Unlock()
		}
	}
	t.h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serverKey{}, srv)))
	var ss *sdk.ServerSession
	for x := range srv.Sessions() {
		ss = x
	}
	if s.id == "" || ss == nil || ss.ID() != s.id || ss.InitializeParams() == nil {
		// Not initialised (a refused request, or a probe of the
		// stateless protocol such as server/discover): the SDK closes it.
		s.end()
		return nil
	}
	s.start(srv, ss)
	return nil
}

// initializes reports whether r's body is an initialize request (alone or
// in a batch), the one request that opens a session. It reads the body (at
// most BodyLimit and a byte) and puts it back for the SDK.
func (t *Transport) initializes(r *http.Request) bool {
	head, err := io.ReadAll(io.LimitReader(r.Body, t.cfg.BodyLimit+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	if err != nil {
		return false
	}
	type call struct {
		Method string `json:"method"`
	}
	var one call
	if json.Unmarshal(head, &one) == nil {
		return one.Method == methodInitialize
	}
	var batch []call
	if json.Unmarshal(head, &batch) == nil {
		for _, c := range batch {
			if c.Method == methodInitialize {
				return true
			}
		}
	}
	return false
}

const methodInitialize = "initialize"

// enter counts a new session of caller in, or refuses it.
func (t *Transport) enter(caller string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return errs.Unavailable("agentbus is shutting down; connect to another replica")
	}
	if ok, _ := t.open.Take(caller); !ok {
		e := errs.New(errs.CodeRateLimited, "too many MCP sessions are open (at most %d per credential, %d in all on this replica); end one (DELETE with its Mcp-Session-Id) or wait for an idle one to time out",
			t.cfg.SessionsPerCaller, t.cfg.Sessions)
		e.Details = map[string]any{"retryAfterSeconds": 5}
		return e
	}
	return nil
}

// leave counts a session of caller out.
func (t *Transport) leave(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.id != "" && t.sessions[s.id] == s {
		delete(t.sessions, s.id)
	}
	t.open.Give(s.caller)
}

// Sessions returns how many sessions are open, for metrics and tests.
func (t *Transport) Sessions() int { return t.open.Open() }

// stop ends every session and refuses new ones.
func (t *Transport) stop() {
	for _, s := range t.openSessions(func() { t.stopped = true }) {
		s.close()
	}
}

// openSessions runs change under the transport's lock and returns the
// sessions open then, to act on outside it.
func (t *Transport) openSessions(change func()) []*session {
	t.mu.Lock()
	defer t.mu.Unlock()
	change()
	open := make([]*session, 0, len(t.sessions))
	for _, s := range t.sessions {
		open = append(open, s)
	}
	return open
}
