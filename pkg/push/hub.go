// Package push hands the events this replica sees published to the
// listeners that want them as they come: live feeds of a tenant's events
// (SSE) and watches of one command's events (MCP sessions, A2A tasks). It
// follows the event log once per replica (bus.Log.Follow), so every replica
// pushes to its own listeners and a NATS reconnect loses nothing. It holds
// no event beyond a listener's bounded queue: a listener that falls behind
// is told so and catches up from the log. It imports nothing of NATS or of
// a transport.
package push

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Hub follows the event log and hands each event to its listeners. Safe
// for concurrent use.
type Hub struct {
	events bus.Log
	subj   bus.Subjects
	log    *slog.Logger

	mu      sync.RWMutex
	feeds   map[string]map[*Feed]struct{}    // by tenant
	watches map[watchKey]map[*watch]struct{} // by tenant and correlation id
}

type watchKey struct{ tenant, correlationID string }

type watch struct{ fn func(*bus.Message) }

// New returns a hub on the event log. It hands nothing out before Start.
func New(events bus.Log, prefix string, log *slog.Logger) *Hub {
	return &Hub{events: events, subj: bus.Subjects{Prefix: prefix}, log: log,
		feeds: map[string]map[*Feed]struct{}{}, watches: map[watchKey]map[*watch]struct{}{}}
}

// Start follows the event log from its end until ctx ends (the events
// stored before are read from the log by whoever needs them), and returns
// once it follows, or the error of reading the log's end.
func (h *Hub) Start(ctx context.Context) error {
	last, err := h.events.LastSeq(ctx)
	if err != nil {
		return err
	}
	h.events.Follow(ctx, h.subj.Event(bus.RootEvents, "*", "*", "*", "*"), last+1, h.dispatch)
	return nil
}

// dispatch hands m to the feeds of its tenant and the watches of its
// command. It never blocks: a feed whose queue is full is marked behind.
func (h *Hub) dispatch(m *bus.Message) {
	tenant, _, _, typ, ok := h.subj.ParseEvent(m.Subject)
	if !ok {
		return
	}
	ev := &Event{Message: m, Type: typ, CorrelationID: m.Header.Get(bus.HeaderCorrelationID)}
	h.mu.RLock()
	defer h.mu.RUnlock()
	defer h.trace(m, tenant, typ, ev.CorrelationID)()
	if feeds := h.feeds[tenant]; len(feeds) > 0 {
		ev.Servable = bus.JSONObject(m.Data) // once, for every feed
		for f := range feeds {
			f.offer(ev)
		}
	}
	if ev.CorrelationID == "" {
		return
	}
	for w := range h.watches[watchKey{tenant, ev.CorrelationID}] {
		w.fn(m)
	}
}

// trace starts the span of m's push, in the trace its headers carry,
// when it has one and a listener; it returns what ends it. Called with
// h.mu held.
func (h *Hub) trace(m *bus.Message, tenant, typ, corr string) (end func()) {
	if _, ok := m.Header[tracing.HeaderTraceParent]; !ok {
		return func() {}
	}
	n := len(h.feeds[tenant])
	if corr != "" {
		n += len(h.watches[watchKey{tenant, corr}])
	}
	if n == 0 {
		return func() {}
	}
	_, span := tracing.Start(tracing.Extract(context.Background(), m.Header), "push", trace.SpanKindProducer,
		attribute.String("agentbus.event.type", typ), attribute.Int("agentbus.push.listeners", n))
	return func() { span.End() }
}

// Event is one event handed to a feed: the stored message, its type (from
// its subject), its correlation id (from its header; "" when it has none)
// and whether a read would serve it.
type Event struct {
	*bus.Message
	Type          string
	CorrelationID string
	// Servable says the payload is a JSON object (bus.JSONObject), as a
	// read would serve it.
	Servable bool
}

// Watch calls fn with every event of tenant's command correlationID that
// the hub hands out after Watch returns, in stream order, until the
// returned cancel is called (cancel is idempotent). fn runs on the hub's
// goroutine: it must not block, and must copy what it keeps of the
// message. Events stored before are not handed out: read them from the log
// (the command's trace) after Watch returns, and drop any seen twice by
// sequence.
func (h *Hub) Watch(tenant, correlationID string, fn func(*bus.Message)) (cancel func()) {
	w := &watch{fn: fn}
	k := watchKey{tenant, correlationID}
	h.mu.Lock()
	set := h.watches[k]
	if set == nil {
		set = map[*watch]struct{}{}
		h.watches[k] = set
	}
	set[w] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.watches[k], w)
			if len(h.watches[k]) == 0 {
				delete(h.watches, k)
			}
		})
	}
}

// Watching returns how many watches and feeds are open, for metrics and
// tests.
func (h *Hub) Watching() (watches, feeds int) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, s := range h.watches {
		watches += len(s)
	}
	for _, s := range h.feeds {
		feeds += len(s)
	}
	return watches, feeds
}

// Feed is a live queue of one tenant's events that match a filter. Read
// C; when Behind reports that events were dropped because the queue was
// full, read what C lacks from the log and go on. Close it when done.
type Feed struct {
	// C carries the matching events in stream order, as the hub hands
	// them out after the feed was opened.
	C <-chan *Event
	// Lagged receives when the feed falls behind (see Behind).
	Lagged <-chan struct{}
	c      chan *Event
	lagged chan struct{}
	match  func(*Event) bool
	behind atomic.Bool
	close  func()
}

// Feed opens a feed of tenant's events for which match (nil for every
// event) is true, with a queue of size events. match runs on the hub's
// goroutine and must not block.
func (h *Hub) Feed(tenant string, match func(*Event) bool, size int) *Feed {
	c, lagged := make(chan *Event, max(size, 1)), make(chan struct{}, 1)
	f := &Feed{C: c, c: c, Lagged: lagged, lagged: lagged, match: match}
	h.mu.Lock()
	set := h.feeds[tenant]
	if set == nil {
		set = map[*Feed]struct{}{}
		h.feeds[tenant] = set
	}
	set[f] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	f.close = func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.feeds[tenant], f)
			if len(h.feeds[tenant]) == 0 {
				delete(h.feeds, tenant)
			}
		})
	}
	return f
}

func (f *Feed) offer(ev *Event) {
	if f.match != nil && !f.match(ev) {
		return
	}
	if f.behind.Load() {
		return // the reader reads the log until it catches up
	}
	select {
	case f.c <- ev:
	default:
		f.behind.Store(true)
		select {
		case f.lagged <- struct{}{}:
		default:
		}
	}
}

// Behind reports whether the feed dropped an event since the last
// CatchUp, and so whether C has a gap.
func (f *Feed) Behind() bool { return f.behind.Load() }

// CatchUp empties C and clears Behind: the reader then reads the log from
// where it stopped up to its end, and goes on with C, skipping what it has
// already read by sequence.
func (f *Feed) CatchUp() {
	f.behind.Store(false)
	select {
	case <-f.lagged:
	default:
	}
	for {
		select {
		case <-f.c:
		default:
			return
		}
	}
}

// Close stops the feed; C is not closed.
func (f *Feed) Close() { f.close() }
