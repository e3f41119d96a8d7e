package ops

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/push"
	"github.com/agentbus/agentbus/pkg/pushlog"
	"github.com/agentbus/agentbus/pkg/query"
)

// StreamConfig bounds the live event streams (listEvents followed live,
// over SSE). Zero values take the defaults noted.
type StreamConfig struct {
	// Max bounds the streams open at once on this replica (default 1000);
	// PerCaller those of one credential (default 20; anonymous callers
	// are held to Max only). Past either a new stream is refused
	// RATE_LIMITED.
	Max, PerCaller int
	// Heartbeat is how long a stream stays silent before it sends a
	// heartbeat (default 15s).
	Heartbeat time.Duration
	// Recheck is how often every live stream (SSE, MCP session push, A2A
	// task stream) checks its credential again, however busy it is (see
	// Hold): default and at most MaxRecheck.
	Recheck time.Duration
	// Queue is how many events a stream holds for a slow reader before it
	// falls behind and reads the log instead (default 256).
	Queue int
}

func (c *StreamConfig) defaults() {
	if c.Max <= 0 {
		c.Max = 1000
	}
	if c.PerCaller <= 0 {
		c.PerCaller = 20
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.Queue <= 0 {
		c.Queue = 256
	}
	if c.Recheck <= 0 || c.Recheck > MaxRecheck {
		c.Recheck = MaxRecheck
	}
}

// ResumeAfter is the parameter a transport sets to the position a
// reconnecting client resumes after (SSE's Last-Event-ID header): it takes
// the place of "after", and a bad one is refused under its own name.
const ResumeAfter = "Last-Event-ID"

// StreamItem is one thing a live stream sends: an event with its cursor,
// or (Data nil) a heartbeat.
type StreamItem struct {
	// Cursor resumes the stream after this event (the "after" parameter,
	// or SSE's Last-Event-ID).
	Cursor string
	Data   json.RawMessage
	// More says another item follows at once: a transport may hold this
	// one back to send them together.
	More bool
}

// Emit sends one item of a live stream. An error ends the stream. An item
// with More false is written, with those held back before it, when Emit
// returns nil: the stream records the events so written as pushes.
type Emit func(StreamItem) error

// enterStream takes one of the live streams caller may hold open, or
// returns RATE_LIMITED; the function it returns gives it back
// (idempotent).
func (s *Surface) enterStream(caller string) (func(), error) {
	if ok, _ := s.live.Take(caller); !ok {
		e := errs.New(errs.CodeRateLimited, "too many live streams (SSE streams, A2A task streams) are open; close one, or read pages or tasks instead")
		e.Details = map[string]any{"retryAfterSeconds": 5}
		return nil, e
	}
	var once sync.Once
	return func() { once.Do(func() { s.live.Give(caller) }) }, nil
}

// streamEvents follows listEvents live: it sends the events after the
// cursor ("after"; the transport passes SSE's Last-Event-ID there; "0"
// replays the log from its start) that match the filters, in stream
// order, each with the cursor that resumes after it, then every matching
// event as it is published, and a heartbeat after Heartbeat of silence.
// Without a cursor it starts at the log's end: new events only. It
// returns when ctx ends (nil), emit fails, or the caller's credential no
// longer holds (the UNAUTHENTICATED error of r.Credential, checked as Hold
// says). A reader slower than the events falls behind and reads the log
// until it catches up: what a stream holds is bounded by Queue events or
// one page. Invalid filters fail it before anything is sent, as
// listEvents, and before it takes its live-stream slot (r.Slot).
func (s *Surface) streamEvents(ctx context.Context, r *Request, emit Emit) error {
	if v := r.Param("view"); v != "" && v != "log" {
		return errs.Invalid("invalid query parameters", []errs.Violation{{Path: "view", Message: `a live stream is of the log: "log" or omitted`}})
	}
	after := r.Param("after")
	resume := r.Param(ResumeAfter)
	if resume != "" {
		after = resume
	}
	q, err := s.reads.ParseEventQuery(r.Tenant, r.Params["type"], r.Param("correlationId"), after, r.Param("limit"), r.Param("synthetic"))
	if err != nil {
		var e *errs.Error
		if resume != "" && errors.As(err, &e) {
			for i := range e.Violations {
				if e.Violations[i].Path == "after" { // the caller sent no after: name what it sent
					e.Violations[i] = errs.Violation{Path: ResumeAfter, Message: "must be the id of an event a live stream sent"}
				}
			}
		}
		return err
	}
	if q.Synthetic {
		return errs.Invalid("invalid query parameters", []errs.Violation{{Path: "synthetic",
			Message: "injected events are not streamed live; page them with GET /events?synthetic=true"}})
	}
	if s.p.Hub == nil {
		return errs.New(errs.CodeCapabilityNotSupported, "live event streams are not served here")
	}
	if r.Slot != nil {
		leave, err := r.Slot()
		if err != nil {
			return err
		}
		defer leave()
	}
	feed := s.p.Hub.Feed(r.Tenant, matchQuery(q), s.cfg.Streams.Queue)
	defer feed.Close()
	// Without a cursor the stream starts at the log's end, read once the
	// feed is open, so that no new event falls between the two.
	var cursor uint64
	if q.After != "" {
		cursor, _ = s.reads.CursorSeq(r.Tenant, false, q.After) // checked by ParseEventQuery
	} else if cursor, err = s.p.LogEnd.LastSeq(ctx); err != nil {
		return err
	}
	// Events stored after opened are pushes of this stream, whether it
	// took them live or read them from the log (it fell behind, or they
	// came while it opened); those before are a replay, a read
	// (docs/decisions.md). With a cursor, the log's end is asked for this
	// alone: unknown, the events read from the log are not listed.
	opened := cursor
	if q.After != "" {
		if opened, err = s.p.LogEnd.LastSeq(ctx); err != nil {
			opened = math.MaxUint64
		}
	}
	if err := emit(StreamItem{}); err != nil { // the stream is open
		return err
	}
	listener := pushlog.Listener{Tenant: r.Tenant, Transport: pushlog.SSE, Label: CallerLabel(r.Caller)}
	// Events that come together are written together (More): held are
	// those emitted and not written yet, pushes once an item not held back
	// is written. At most maxHeld wait, so a busy stream writes that often.
	var held []*push.Event
	written := func() []*push.Event {
		w := held
		held = held[:0] // Follow is done with w before the next event
		return w
	}
	return s.Follow(ctx, func() Credential { return r.Credential }, Follower{
		Feed:     feed,
		Listener: listener,
		// Read the log from the cursor to its end, then go live. A
		// command's events are found through its receipt, which trails the
		// log: it is brought up to what the log held when the feed opened
		// (or was caught up), so that none falls between the two.
		ReadFirst: true,
		Read: func(ctx context.Context) (bool, bool, error) {
			if q.CorrelationID != "" && s.p.Receipts != nil {
				_ = s.p.Receipts.Current(ctx) // best effort: behind, the next catch-up reads again
			}
			// An item of the log written with More false writes what the
			// feed's events held back too.
			flushed := false
			caught, err := s.streamFromLog(ctx, r, q, &cursor, func(it StreamItem, m *bus.Message) error {
				if err := emit(it); err != nil {
					return err
				}
				// Written with the next item not held back, like the
				// feed's.
				if m.Seq > opened {
					if ev := s.reads.Event(m); ev.CorrelationID != "" {
						held = append(held, push.NewEvent(ev))
					}
				}
				flushed = flushed || !it.More
				return nil
			})
			if flushed {
				s.pushed(listener, written())
			}
			return caught, false, err
		},
		Event: func(_ context.Context, ev *push.Event, more bool) ([]*push.Event, error) {
			if ev.Seq <= cursor || !ev.Servable {
				if more || len(held) == 0 {
					return nil, nil
				}
				// The last of those that came together is left out: what
				// waits for it is written now, not with a later event.
				if err := emit(StreamItem{}); err != nil {
					return nil, err
				}
				return written(), nil
			}
			more = more && len(held) < maxHeld
			if err := emit(StreamItem{Cursor: s.reads.Cursor(r.Tenant, false, ev.Seq), Data: ev.Data, More: more}); err != nil {
				return nil, err
			}
			cursor = ev.Seq
			held = append(held, ev)
			if more {
				return nil, nil
			}
			return written(), nil
		},
		Quiet: s.cfg.Streams.Heartbeat,
		Beat: func(context.Context) error {
			if err := emit(StreamItem{}); err != nil {
				return err
			}
			s.pushed(listener, written())
			return nil
		},
	})
}

// maxHeld bounds the events a live stream of the log holds back to write
// together (StreamItem.More).
const maxHeld = 64

// CallerLabel names a caller's live stream in the pushes a trace lists:
// "key <id>" (an API key's id, which the source of the commands it sends
// shows too), or "anonymous".
func CallerLabel(caller string) string {
	if caller == "" {
		return "anonymous"
	}
	return "key " + caller
}

// streamFromLog sends the pages of the log after *cursor, moving it, until
// a page comes back empty (caught true). A read refused for the read
// bounds is tried again a second later (caught false).
func (s *Surface) streamFromLog(ctx context.Context, r *Request, q query.EventQuery, cursor *uint64, emit func(StreamItem, *bus.Message) error) (caught bool, err error) {
	q.Limit = s.cfg.PageMax
	for {
		q.After = s.reads.Cursor(r.Tenant, false, *cursor)
		page, err := s.reads.ListEventsFor(ctx, r.Caller, r.Tenant, q)
		if errs.CodeOf(err) == errs.CodeRateLimited {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			return false, nil
		}
		if err != nil || ctx.Err() != nil {
			return false, err
		}
		for i, data := range page.Events {
			m := page.Messages[i]
			if err := emit(StreamItem{Cursor: s.reads.Cursor(r.Tenant, false, m.Seq), Data: data, More: i < len(page.Events)-1}, m); err != nil {
				return false, err
			}
		}
		next := page.NextSeq
		prev := *cursor
		*cursor = max(*cursor, next)
		if len(page.Events) == 0 && *cursor == prev {
			// An empty page whose cursor moved read only events it does
			// not serve: more may follow.
			return true, nil
		}
	}
}

// matchQuery is q's filter as the hub applies it to live events.
func matchQuery(q query.EventQuery) func(*push.Event) bool {
	return func(ev *push.Event) bool {
		if q.CorrelationID != "" && ev.CorrelationID != q.CorrelationID {
			return false
		}
		return len(q.Types) == 0 || slices.Contains(q.Types, ev.Type)
	}
}
