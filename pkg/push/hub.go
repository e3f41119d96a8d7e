// Package push hands the events this replica sees published to the
// listeners that want them as they come: live feeds of a tenant's events
// (SSE) and watches of one command's events (MCP sessions, A2A tasks). It
// takes the event log's events from the replica's follower (bus.Tail), so
// every replica pushes to its own listeners and a NATS reconnect loses
// nothing. Every listener reads one kind of bounded queue, a Feed. It
// holds no event beyond a listener's queue: a listener that falls behind
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
	feeds   map[string]map[*Feed]struct{}   // by tenant
	watches map[watchKey]map[*Feed]struct{} // by tenant and correlation id
}

type watchKey struct{ tenant, correlationID string }

// New returns a hub on the event log. It hands nothing out before Start.
func New(events bus.Log, prefix string, log *slog.Logger) *Hub {
	return &Hub{events: events, subj: bus.Subjects{Prefix: prefix}, log: log,
		feeds: map[string]map[*Feed]struct{}{}, watches: map[watchKey]map[*Feed]struct{}{}}
}

// Start follows the event log from its end until ctx ends (the events
// stored before are read from the log by whoever needs them), and returns
// once it follows, or the error of reading the log's end.
func (h *Hub) Start(ctx context.Context) error {
	return h.StartOn(ctx, bus.LogTail(h.events, h.subj))
}

// StartOn is Start with the events from tail (the replica's follower of
// the log).
func (h *Hub) StartOn(ctx context.Context, tail bus.Tail) error {
	last, err := h.events.LastSeq(ctx)
	if err != nil {
		return err
	}
	tail.Follow(ctx, h.subj.Event(bus.RootEvents, "*", "*", "*", "*"), last+1, h.dispatch)
	return nil
}

// dispatch hands e to the feeds of its tenant and those watching its
// command. It never blocks: a feed whose queue is full is marked behind.
// The payload's decoding and the span happen outside h.mu, which the hub
// holds only to read its listeners and offer.
func (h *Hub) dispatch(e *bus.Event) {
	if !e.Parsed {
		return
	}
	n := h.listeners(e.Tenant, e.CorrelationID)
	if n == 0 {
		return
	}
	ev := NewEvent(e) // once, for every feed
	defer h.trace(e.Message, e.Type, n)()
	h.mu.RLock()
	defer h.mu.RUnlock()
	for f := range h.feeds[e.Tenant] {
		f.offer(ev)
	}
	if ev.CorrelationID != "" {
		for f := range h.watches[watchKey{e.Tenant, ev.CorrelationID}] {
			f.offer(ev)
		}
	}
}

// listeners returns how many feeds take tenant's events and watch the
// command corr ("" for none).
func (h *Hub) listeners(tenant, corr string) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := len(h.feeds[tenant])
	if corr != "" {
		n += len(h.watches[watchKey{tenant, corr}])
	}
	return n
}

// trace starts the span of m's push to n listeners, in the trace its
// headers carry, when tracing is on and it has one; it returns what ends it.
func (h *Hub) trace(m *bus.Message, typ string, n int) (end func()) {
	if !tracing.On() {
		return func() {}
	}
	if _, ok := m.Header[tracing.HeaderTraceParent]; !ok {
		return func() {}
	}
	_, span := tracing.Start(tracing.Extract(context.Background(), m.Header), "push", trace.SpanKindProducer,
		attribute.String("agentbus.event.type", typ), attribute.Int("agentbus.push.listeners", n))
	return func() { span.End() }
}

// Event is one event handed to a feed: the stored message, its type (from
// its subject), its correlation id (from its header; "" when it has none),
// its envelope's id and whether a read would serve it.
type Event struct {
	*bus.Message
	Type          string
	CorrelationID string
	// ID is the envelope's "id" ("" when it has none).
	ID string
	// Servable says the payload is a JSON object (bus.JSONObject), as a
	// read would serve it.
	Servable bool
}

// NewEvent is e as it is pushed: its subject's type, its command's
// correlation id, and its envelope's id and shape, decoded once.
func NewEvent(e *bus.Event) *Event {
	ev := &Event{Message: e.Message, Type: e.Type, CorrelationID: e.CorrelationID}
	ev.ID, _, ev.Servable = e.Envelope()
	return ev
}

// Watching returns how many command watches (Feed.Watch) and feeds of a
// tenant's events are open, for metrics and tests.
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

// Feed is the one bounded live queue of events every live stream reads:
// of one tenant's events that match a filter (Hub.Feed: SSE), or of the
// commands it watches (Hub.Commands, Watch: MCP sessions, A2A task
// streams). Read C; when Behind reports that events were dropped because
// the queue was full, read what C lacks from the log and go on. Close it
// when done. A nil *Feed (a stream without a hub) receives nothing.
type Feed struct {
	// C carries the matching events in stream order, as the hub hands
	// them out after the feed was opened (or the command watched). The
	// events are the hub's: not to be modified.
	C <-chan *Event
	// Lagged receives when the feed falls behind (see Behind).
	Lagged <-chan struct{}
	h      *Hub
	tenant string
	c      chan *Event
	lagged chan struct{}
	match  func(*Event) bool
	behind atomic.Bool
	close  func()
	// watched are the commands the feed watches, under h.mu.
	watched map[string]struct{}
}

// Feed opens a feed of tenant's events for which match (nil for every
// event) is true, with a queue of size events. match runs on the hub's
// goroutine and must not block.
func (h *Hub) Feed(tenant string, match func(*Event) bool, size int) *Feed {
	f := h.newFeed(tenant, size)
	f.match = match
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

func (h *Hub) newFeed(tenant string, size int) *Feed {
	c, lagged := make(chan *Event, max(size, 1)), make(chan struct{}, 1)
	return &Feed{C: c, c: c, Lagged: lagged, lagged: lagged, h: h, tenant: tenant, watched: map[string]struct{}{}}
}

// Commands opens a feed of the events of tenant's commands it watches
// (Watch), none at first, with a queue of size events. Closing it ends
// every watch. A nil hub opens a feed that receives nothing.
func (h *Hub) Commands(tenant string, size int) *Feed {
	if h == nil {
		return nil
	}
	f := h.newFeed(tenant, size)
	var once sync.Once
	f.close = func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			for corr := range f.watched {
				h.unwatchLocked(f, corr)
			}
		})
	}
	return f
}

// Watch has the feed (of Hub.Commands) receive every event of its
// tenant's command correlationID that the hub hands out after Watch
// returns, until the returned cancel is called (idempotent) or the feed
// is closed. Events stored before are not handed out: read them from the
// log (the command's trace) after Watch returns, and drop any seen twice
// by sequence. Watching a command twice watches it once.
func (f *Feed) Watch(correlationID string) (cancel func()) {
	if f == nil {
		return func() {}
	}
	h := f.h
	k := watchKey{f.tenant, correlationID}
	h.mu.Lock()
	set := h.watches[k]
	if set == nil {
		set = map[*Feed]struct{}{}
		h.watches[k] = set
	}
	set[f] = struct{}{}
	f.watched[correlationID] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.unwatchLocked(f, correlationID)
	}
}

// unwatchLocked ends f's watch of corr. Called with h.mu held.
func (h *Hub) unwatchLocked(f *Feed, corr string) {
	k := watchKey{f.tenant, corr}
	delete(h.watches[k], f)
	if len(h.watches[k]) == 0 {
		delete(h.watches, k)
	}
	delete(f.watched, corr)
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
func (f *Feed) Behind() bool { return f != nil && f.behind.Load() }

// Events is C, nil (never ready) for a nil feed.
func (f *Feed) Events() <-chan *Event {
	if f == nil {
		return nil
	}
	return f.C
}

// Lags is Lagged, nil (never ready) for a nil feed.
func (f *Feed) Lags() <-chan struct{} {
	if f == nil {
		return nil
	}
	return f.Lagged
}

// CatchUp empties C and clears Behind: the reader then reads the log from
// where it stopped up to its end, and goes on with C, skipping what it has
// already read by sequence.
func (f *Feed) CatchUp() {
	if f == nil {
		return
	}
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

// Close stops the feed; C is not closed. Closing a nil feed does
// nothing.
func (f *Feed) Close() {
	if f != nil {
		f.close()
	}
}
