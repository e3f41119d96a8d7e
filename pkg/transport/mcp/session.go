package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/push"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// session is one MCP session: its caller, the commands it watches and
// the feed of their events, pushed by its own goroutine. Each session has
// a server of its own, so that a resource update reaches it alone.
type session struct {
	t      *Transport
	tenant string
	caller string
	// latest is the credential as its latest request showed it: its
	// tenants and scopes (ops.Caller.Allow), its check and its expiry.
	latest atomic.Pointer[ops.Caller]
	// id is the SDK's session id, set as the session's first answer
	// starts.
	id string

	// feed holds the events of the commands it watches until run pushes
	// them (nil without a hub).
	feed *push.Feed
	// ctx ends with the session (stop) or at shutdown.
	ctx  context.Context
	stop context.CancelFunc
	once sync.Once

	mu      sync.Mutex
	watches map[string]*watch // by correlation id
	order   []*watch          // oldest first
	ended   bool

	srv   *sdk.Server
	ss    *sdk.ServerSession
	tools map[string]tool // what srv offers, by name

	// notified counts the event notifications the session's connection
	// took (notifications/message, notifications/resources/updated).
	notified atomic.Uint64
}

// watch is one command a session follows.
type watch struct {
	corr   string
	cancel func()
	timer  *time.Timer
}

func (t *Transport) newSession(c Caller) *session {
	s := &session{t: t, tenant: c.Tenant, caller: c.ID, feed: t.surface.FollowCommands(c.Tenant), watches: map[string]*watch{}}
	s.ctx, s.stop = context.WithCancel(t.cfg.Stop)
	s.latest.Store(&c.Caller)
	return s
}

// newServer returns the session's server, with every tool and resource.
func (s *session) newServer() *sdk.Server {
	t := s.t
	srv := sdk.NewServer(t.implementation(), &sdk.ServerOptions{
		Instructions: instructions,
		KeepAlive:    t.cfg.KeepAlive, KeepAliveFailureThreshold: 3,
		SubscribeHandler:   s.subscribe,
		UnsubscribeHandler: func(context.Context, *sdk.UnsubscribeRequest) error { return nil },
		// The tools follow the catalogue: the SDK sends
		// notifications/tools/list_changed only when ListChanged is set.
		Capabilities: &sdk.ServerCapabilities{Logging: &sdk.LoggingCapabilities{},
			Tools: &sdk.ToolCapabilities{ListChanged: true}, Resources: &sdk.ResourceCapabilities{Subscribe: true}},
	})
	srv.AddSendingMiddleware(s.countNotified)
	tools := t.currentTools()
	s.tools = make(map[string]tool, len(tools))
	for _, tl := range tools {
		srv.AddTool(tl.def, s.callTool(tl))
		s.tools[tl.def.Name] = tl
	}
	s.addResources(srv)
	return srv
}

// instructions tell a client how the tools and the push work.
const instructions = "agentbus: an event-sourced command and event service. Submit a command with submitCommand " +
	"(a full envelope) or with the typed tool of its type (its data only); either returns the command's " +
	"correlation id. The events the command causes are pushed to this session as they are published: " +
	"as notifications/message (after logging/setLevel) and as notifications/resources/updated on " +
	"agentbus://commands/{correlationId} (after resources/subscribe), whose resources/read is the command's " +
	"whole story (status and events). listEvents with correlationId reads them too."

// admit is the door's check (ops.Admit) of a call of op by the session's
// credential, as its latest request showed it.
func (s *session) admit(op ops.Operation) (*ops.Call, error) {
	return ops.Admit(s.latest.Load().Via("mcp"), s.tenant, op)
}

// start runs the session's push once the SDK has opened it, until it ends.
func (s *session) start(srv *sdk.Server, ss *sdk.ServerSession) {
	s.mu.Lock()
	s.srv, s.ss = srv, ss
	s.mu.Unlock()
	s.syncTools() // the catalogue may have changed since newServer
	s.t.mu.Lock()
	stopped := s.t.stopped
	s.t.mu.Unlock()
	if stopped { // opened as agentbus began to stop
		s.close()
		return
	}
	go s.run()
	go func() {
		_ = ss.Wait()
		s.end()
	}()
}

// end releases the session: its watches, its goroutine, its place.
func (s *session) end() {
	s.once.Do(func() {
		s.stop()
		s.mu.Lock()
		s.ended = true
		ws := s.order
		s.watches, s.order = nil, nil
		s.mu.Unlock()
		for _, w := range ws {
			w.stop()
		}
		s.feed.Close()
		s.t.leave(s)
	})
}

// close ends the session from the server's side (shutdown).
func (s *session) close() {
	s.mu.Lock()
	ss := s.ss
	s.mu.Unlock()
	if ss != nil {
		_ = ss.Close()
	}
	s.end()
}

func (w *watch) stop() {
	w.timer.Stop()
	w.cancel()
}

// watch follows the events of command corr of the session's tenant, from
// now on, pushing each to the session. It returns whether the watch is
// new (false: the command was watched already, or the session ended), and
// a function that ends a new watch (for a submission that failed). Past
// the bound the oldest watch ends; each ends after WatchTTL.
func (s *session) watch(corr string) (bool, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.watches[corr] != nil {
		return false, func() {}
	}
	for len(s.order) >= s.t.cfg.Watches {
		s.dropLocked(s.order[0])
	}
	w := &watch{corr: corr}
	w.cancel = s.feed.Watch(corr)
	w.timer = time.AfterFunc(s.t.cfg.WatchTTL, func() { s.unwatch(w) })
	s.watches[corr] = w
	s.order = append(s.order, w)
	return true, func() { s.unwatch(w) }
}

func (s *session) unwatch(w *watch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watches[w.corr] == w {
		s.dropLocked(w)
	}
}

func (s *session) dropLocked(w *watch) {
	w.stop()
	delete(s.watches, w.corr)
	for i, x := range s.order {
		if x == w {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}

// run pushes the events of the commands the session watches until it
// ends, on ops' one loop for live streams, and ends the session when its
// credential no longer holds. A session that falls behind drops events
// (push.Feed), and says so in the log.
func (s *session) run() {
	lags := 0
	err := s.t.surface.Follow(s.ctx, func() ops.Credential { return s.latest.Load().Credential() }, ops.Follower{
		Feed:     s.feed,
		Listener: ops.Listener{Tenant: s.tenant, Transport: ops.PushMCP, Label: sessionLabel(s.id)},
		Event: func(_ context.Context, ev *push.Event, _ bool) ([]*push.Event, error) {
			if ev.Servable && s.push(ev.CorrelationID, ev.Data) {
				return []*push.Event{ev}, nil
			}
			return nil, nil
		},
		// Called once the feed fell behind: the events dropped stay
		// readable in their commands' resources. Logged the first time
		// and every 100th after, not every time.
		Read: func(context.Context) (bool, bool, error) {
			if lags++; lags == 1 || lags%100 == 0 {
				s.t.log.Warn("an MCP session is not reading its events fast enough: events dropped (they stay readable in their commands' resources)",
					"session", s.id, "tenant", s.tenant, "timesBehind", lags)
			}
			return true, false, nil
		},
	})
	if err != nil {
		s.t.log.Info("an MCP session ends: its credential no longer holds", "session", s.id, "tenant", s.tenant, "reason", err)
		go s.close() // close waits for run
	}
}

// push sends one event of command corr as notifications/message (which
// the SDK drops until the client sets a logging level) and as
// notifications/resources/updated on the command's resource (which the
// SDK sends only when the session subscribed to it), with a context of its
// own: a tool call's has ended by then. It reports whether the session's
// connection took either.
func (s *session) push(corr string, data []byte) bool {
	before := s.notified.Load()
	ctx, cancel := context.WithTimeout(s.t.cfg.Stop, s.t.cfg.WriteTimeout)
	defer cancel()
	uri := CommandURI(corr)
	event := json.RawMessage(data)
	if err := s.ss.Log(ctx, &sdk.LoggingMessageParams{Level: "info", Logger: "agentbus.events",
		Meta: sdk.Meta{"correlationId": corr, "uri": uri}, Data: event}); err != nil {
		s.t.log.Debug("MCP event not pushed", "session", s.id, "correlationId", corr, "err", err)
	}
	if err := s.srv.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: uri,
		Meta: sdk.Meta{"correlationId": corr, "event": event}}); err != nil {
		s.t.log.Debug("MCP resource update not pushed", "session", s.id, "correlationId", corr, "err", err)
	}
	return s.notified.Load() != before
}

// countNotified is the session's sending middleware: it counts the event
// notifications the connection took. The SDK leaves out a log message
// below the session's level and an update of a resource it did not
// subscribe to, and only logs a failed update: this is how push knows
// what went out.
func (s *session) countNotified(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		if err == nil && (method == "notifications/message" || method == "notifications/resources/updated") {
			s.notified.Add(1)
		}
		return res, err
	}
}

// sessionLabel names an MCP session in the pushes a trace lists without
// its id, which lets whoever holds it use the session: the first 12 hex
// digits of the id's SHA-256.
func sessionLabel(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "session " + hex.EncodeToString(sum[:6])
}
