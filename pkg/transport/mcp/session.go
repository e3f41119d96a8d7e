package mcp

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// session is one MCP session: its caller, the commands it watches and
// the queue of their events, pushed by its own goroutine. Each session has
// a server of its own, so that a resource update reaches it alone.
type session struct {
	t      *Transport
	tenant string
	caller string
	// allow is the tenant and scope check of the credential as its
	// latest request showed it (ops.Caller.Allow).
	allow atomic.Pointer[func(string, ops.Scope) error]
	// valid checks the credential as its latest request showed it.
	valid atomic.Pointer[func(context.Context) error]
	// id is the SDK's session id, set as the session's first answer
	// starts.
	id string

	q       chan pushed
	dropped atomic.Int64 // events the full queue refused
	done    chan struct{}
	once    sync.Once

	mu      sync.Mutex
	watches map[string]*watch // by correlation id
	order   []*watch          // oldest first
	ended   bool

	srv   *sdk.Server
	ss    *sdk.ServerSession
	tools map[string]tool // what srv offers, by name
}

// watch is one command a session follows.
type watch struct {
	corr   string
	cancel func()
	timer  *time.Timer
}

// pushed is one event to push: its envelope and its command.
type pushed struct {
	corr  string
	event json.RawMessage
}

func (t *Transport) newSession(c Caller) *session {
	s := &session{t: t, tenant: c.Tenant, caller: c.ID, q: make(chan pushed, t.cfg.Queue),
		done: make(chan struct{}), watches: map[string]*watch{}}
	s.allow.Store(&c.Allow)
	s.valid.Store(&c.Valid)
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
	return ops.Admit(ops.Caller{ID: s.caller, Allow: *s.allow.Load(), Valid: *s.valid.Load(), Transport: "mcp"}, s.tenant, op)
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
		close(s.done)
		s.mu.Lock()
		s.ended = true
		ws := s.order
		s.watches, s.order = nil, nil
		s.mu.Unlock()
		for _, w := range ws {
			w.stop()
		}
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
	w.cancel = s.t.surface.WatchCommand(s.tenant, corr, func(m *bus.Message) { s.offer(corr, m) })
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

// offer queues an event for the session without blocking (it runs on the
// hub's goroutine); on a full queue the event is dropped and counted.
func (s *session) offer(corr string, m *bus.Message) {
	ev := pushed{corr: corr, event: json.RawMessage(append([]byte(nil), m.Data...))}
	select {
	case s.q <- ev:
	default:
		// Logged at the first drop and every 1,000th after, not once
		// per event.
		if n := s.dropped.Add(1); n == 1 || n%1000 == 0 {
			s.t.log.Warn("an MCP session is not reading its events fast enough: events dropped (they stay readable in their commands' resources)",
				"session", s.id, "tenant", s.tenant, "correlationId", corr, "seq", m.Seq, "dropped", n)
		}
	}
}

// run pushes the queued events until the session ends, and ends it when
// its credential no longer holds (checked at every keep-alive).
func (s *session) run() {
	check := time.NewTicker(s.t.cfg.KeepAlive)
	defer check.Stop()
	for {
		select {
		case <-s.done:
			return
		case ev := <-s.q:
			s.push(ev)
		case <-check.C:
			if valid := *s.valid.Load(); valid != nil {
				if err := valid(s.t.cfg.Stop); err != nil && errs.CodeOf(err) == errs.CodeUnauthenticated {
					s.t.log.Info("an MCP session ends: its credential no longer holds", "session", s.id, "tenant", s.tenant, "reason", err)
					go s.close() // close waits for run
					return
				}
			}
		}
	}
}

// push sends one event as notifications/message (which the SDK drops
// until the client sets a logging level) and as
// notifications/resources/updated on the command's resource (which the
// SDK sends only when the session subscribed to it), with a context of its
// own: a tool call's has ended by then.
func (s *session) push(ev pushed) {
	ctx, cancel := context.WithTimeout(s.t.cfg.Stop, s.t.cfg.WriteTimeout)
	defer cancel()
	uri := CommandURI(ev.corr)
	if err := s.ss.Log(ctx, &sdk.LoggingMessageParams{Level: "info", Logger: "agentbus.events",
		Meta: sdk.Meta{"correlationId": ev.corr, "uri": uri}, Data: ev.event}); err != nil {
		s.t.log.Debug("MCP event not pushed", "session", s.id, "correlationId", ev.corr, "err", err)
	}
	if err := s.srv.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: uri,
		Meta: sdk.Meta{"correlationId": ev.corr, "event": ev.event}}); err != nil {
		s.t.log.Debug("MCP resource update not pushed", "session", s.id, "correlationId", ev.corr, "err", err)
	}
}
