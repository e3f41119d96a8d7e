// Package query is agentbus's reads of the event log: pages of events
// (by type, by command, injected ones), the trace of a command, and the
// bounds on what each caller may read at once (the read gate). It talks to
// storage only through the bus ports and the projections, and is safe for
// concurrent use.
package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/pushlog"
	"github.com/agentbus/agentbus/pkg/webhook/record"
)

// Config holds the reads' settings. Zero values take the defaults noted.
type Config struct {
	Prefix string // subject prefix; default "agentbus"
	// PageDefault and PageMax bound pages; default 100 and 1000.
	PageDefault, PageMax int
	// Reads bounds the reads of the event log (see ReadLimits).
	Reads ReadLimits
	// CursorKey is the key cursors are enciphered with (cursor.go), the
	// same on every replica and across restarts (the server keeps it
	// under CursorKeyName); nil: a random one, whose cursors only this
	// Reader reads.
	CursorKey []byte
}

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = "agentbus"
	}
	if c.PageDefault <= 0 {
		c.PageDefault = 100
	}
	if c.PageMax <= 0 {
		c.PageMax = 1000
	}
	c.Reads.defaults()
}

// Ports are what the reads read.
type Ports struct {
	Commands  bus.Log
	Events    bus.Log
	Synthetic bus.Log
	// TypeIndex finds the events of given types (nil: reads by type
	// filter the log).
	TypeIndex *projection.TypeIndex
	// CommandConsumers are the command log's consumers (a trace tells
	// whether its command was delivered).
	CommandConsumers bus.ConsumerAdmin
	Receipts         *projection.Receipts
	Registries       *projection.Registries
	Pending          *projection.Pending
	// ControlPlane says which command types agentbus processes itself.
	ControlPlane decide.ControlPlane
	// Deliveries are the webhook deliveries a trace lists.
	Deliveries Deliveries
	// Pushes are the pushes to live listeners a trace lists (nil: none).
	Pushes Pushes
}

// Pushes finds the pushes of a command's events to live listeners: by
// time, never nil, and how many more were left out.
type Pushes interface {
	Of(tenant, corr string) ([]pushlog.Record, int)
}

var _ Pushes = (*pushlog.Log)(nil)

// noPushes is Pushes without any.
type noPushes struct{}

func (noPushes) Of(string, string) ([]pushlog.Record, int) { return []pushlog.Record{}, 0 }

// Deliveries finds the webhook deliveries of a command's events.
type Deliveries interface {
	OfCommand(ctx context.Context, tenant, corr string) ([]record.Delivery, error)
}

var _ Deliveries = (*record.Deliveries)(nil)

// Reader reads pages of events and traces. Safe for concurrent use.
type Reader struct {
	cfg   Config
	p     Ports
	subj  bus.Subjects
	log   *slog.Logger
	scans chan struct{} // the pending-command scans running (traces)
	// unservedUpTo is the highest sequence of an unservable event warned
	// about (see servable), so each is logged about once.
	unservedUpTo atomic.Uint64

	// reads holds the places of the event log reads running; tails size
	// the reads of the event logs (events, synthetic).
	reads *readGate
	tails struct{ events, synthetic *tail }
	// cursors format and read the cursors of pages and streams.
	cursors *cursors
}

// New returns the reads on ports.
func New(cfg Config, p Ports, log *slog.Logger) *Reader {
	cfg.defaults()
	if p.Pushes == nil {
		p.Pushes = noPushes{}
	}
	rd := &Reader{cfg: cfg, p: p, subj: bus.Subjects{Prefix: cfg.Prefix}, log: log,
		scans: make(chan struct{}, maxScans), reads: newReadGate(cfg.Reads), cursors: newCursors(cfg.CursorKey)}
	rd.tails.events, rd.tails.synthetic = &tail{log: p.Events}, &tail{log: p.Synthetic}
	return rd
}

// EventQuery selects events of one tenant. The zero value lists everything
// from the start, a default-sized page.
type EventQuery struct {
	Types         []string
	CorrelationID string
	// After is a cursor: a previous page's Next, a live stream's event id,
	// or "0" (or "") for the start of the log.
	After string
	Limit int
	// Synthetic reads injected events instead of production ones.
	Synthetic bool
}

// EventPage is one page of events in stream order. Next is the cursor to
// pass as After for the following page; it is always set, so a poller can
// keep asking for what comes next. It names the page's last event, or an
// event of the tenant's read past it (one the page leaves out: of another
// type, or not servable), or else is the cursor the page was asked after:
// an empty page's Next moves only for the tenant's own events, never for
// another tenant's.
type EventPage struct {
	Events []json.RawMessage `json:"events"`
	Next   string            `json:"next"`
	// Messages are the events' stored messages, in the same order (their
	// Seq: Reader.Cursor makes each the cursor that resumes after that
	// event), and NextSeq the position Next names.
	Messages []*bus.Message `json:"-"`
	NextSeq  uint64         `json:"-"`
}

// MaxTypeFilters bounds the type parameters of one GET /events.
const MaxTypeFilters = 20

// ParseEventQuery checks raw query values of tenant's request (synthetic:
// "", "true" or "false"; after: a cursor of tenant's events of that log)
// and returns the query, or a VALIDATION_FAILED error naming every bad
// parameter.
func (rd *Reader) ParseEventQuery(tenant string, types []string, correlationID, after, limit, synthetic string) (EventQuery, error) {
	q := EventQuery{Types: types, CorrelationID: correlationID, After: after, Limit: rd.cfg.PageDefault}
	var v []errs.Violation
	if len(types) > MaxTypeFilters {
		v = append(v, errs.Violation{Path: "type", Message: "at most " + strconv.Itoa(MaxTypeFilters) + " types per request"})
		types = nil
	}
	for _, t := range types {
		if !envelope.ValidType(t) {
			v = append(v, errs.Violation{Path: "type", Message: strconv.Quote(t) + " is not a PascalCase event type"})
		}
	}
	q.Limit, v = ParseLimit(limit, rd.cfg.PageDefault, rd.cfg.PageMax, v)
	if correlationID != "" && !envelope.ValidTokenID(correlationID) {
		v = append(v, errs.Violation{Path: "correlationId", Message: "must be an id returned by POST /commands"})
	}
	switch synthetic {
	case "", "false":
	case "true":
		q.Synthetic = true
		if correlationID != "" {
			v = append(v, errs.Violation{Path: "correlationId",
				Message: "injected events belong to no command: correlationId cannot be combined with synthetic=true"})
		}
	default:
		v = append(v, errs.Violation{Path: "synthetic", Message: `must be "true" or "false"`})
	}
	if _, err := rd.cursors.parse(tenant, q.Synthetic, after); err != nil {
		v = append(v, badAfter)
	}
	if len(v) > 0 {
		return q, errs.Invalid("invalid query parameters", v)
	}
	return q, nil
}

// badAfter is the violation of a cursor that is not one of the tenant's.
var badAfter = errs.Violation{Path: "after", Message: "must be 0 (the start) or a cursor this tenant was given (a page's next, a live stream's event id)"}

// Cursor returns the cursor that resumes tenant's events (the injected
// events' when synthetic) after the event at sequence seq; "0" for 0, the
// start.
func (rd *Reader) Cursor(tenant string, synthetic bool, seq uint64) string {
	return rd.cursors.format(tenant, synthetic, seq)
}

// CursorSeq returns the sequence a cursor of tenant's events names (0 for
// the start), or ErrBadCursor for one that is not tenant's, of that log.
func (rd *Reader) CursorSeq(tenant string, synthetic bool, cursor string) (uint64, error) {
	return rd.cursors.parse(tenant, synthetic, cursor)
}

// ParseLimit reads a page size parameter ("" for def; at most most) and
// appends its violation to v.
func ParseLimit(limit string, def, most int, v []errs.Violation) (int, []errs.Violation) {
	if limit == "" {
		return def, v
	}
	n, err := strconv.Atoi(limit)
	if err != nil || n < 1 || n > most {
		v = append(v, errs.Violation{Path: "limit", Message: "must be an integer from 1 to " + strconv.Itoa(most)})
	}
	return n, v
}

// ListEvents returns a page of tenant's events matching q, in stream order.
// Lookups by correlation id use the receipt index; other pages the type
// index where it holds the events (Ports.TypeIndex), subject filters
// after it; none scans the stream. It is not bounded: see ListEventsFor.
func (rd *Reader) ListEvents(ctx context.Context, tenant string, q EventQuery) (*EventPage, error) {
	return rd.listEvents(ctx, tenant, q, nil)
}

// ListEventsFor is ListEvents with the read bounded as caller's (the
// credential's id; "" is not bounded): past a bound it returns
// RATE_LIMITED at once (readgate.go).
func (rd *Reader) ListEventsFor(ctx context.Context, caller, tenant string, q EventQuery) (*EventPage, error) {
	turn, err := rd.reads.enter(caller)
	if err != nil {
		return nil, err
	}
	defer turn.end()
	return rd.listEvents(ctx, tenant, q, turn)
}

// listEvents is ListEvents taking a large read's place in turn when the
// page is a large read (see readgate.go).
func (rd *Reader) listEvents(ctx context.Context, tenant string, q EventQuery, turn *readTurn) (*EventPage, error) {
	after, err := rd.cursors.parse(tenant, q.Synthetic, q.After)
	if err != nil {
		return nil, errs.Invalid("invalid query parameters", []errs.Violation{badAfter})
	}
	// next is the page's cursor: it moves only past the tenant's own
	// events. after, where the reads go on, may move past others' (a
	// read's upTo) within this request.
	next := after
	if q.Limit <= 0 {
		q.Limit = rd.cfg.PageDefault
	}
	page := &EventPage{Events: []json.RawMessage{}}
	// A read that held only unservable events (see servable) is followed
	// by the next, so that an empty page still means nothing more is
	// stored; a long stretch of them ends the page empty, its cursor past
	// what was read.
	for range maxSkippingReads {
		var msgs []*bus.Message
		var upTo uint64 // the read covers every match up to here
		var err error
		if q.CorrelationID != "" {
			msgs, err = rd.eventsOfCommand(ctx, tenant, q, after, turn)
		} else if err = rd.sizeRead(ctx, q, after, turn); err == nil {
			msgs, upTo, err = rd.eventsByType(ctx, tenant, q, after)
		}
		if errs.CodeOf(err) == errs.CodeRateLimited {
			return nil, err
		}
		if err != nil {
			return nil, errs.Internal(err)
		}
		for _, m := range msgs {
			if rd.Servable(m) {
				page.Events = append(page.Events, m.Data)
				page.Messages = append(page.Messages, m)
			}
			after, next = m.Seq, max(next, m.Seq)
		}
		after = max(after, upTo)
		// The events of one command come from one receipt, read in full:
		// no further read would find more.
		if len(page.Events) > 0 || len(msgs) == 0 || q.CorrelationID != "" {
			break
		}
	}
	page.Next, page.NextSeq = rd.Cursor(tenant, q.Synthetic, next), next
	return page, nil
}

// maxSkippingReads bounds the reads of one page that find only unservable
// events.
const maxSkippingReads = 8

func (rd *Reader) eventsOfCommand(ctx context.Context, tenant string, q EventQuery, after uint64, turn *readTurn) ([]*bus.Message, error) {
	r, err := rd.p.Receipts.Get(ctx, tenant, q.CorrelationID)
	if errors.Is(err, errs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n := 0
	for _, seq := range r.Events {
		if seq > after {
			n++
		}
	}
	if min(n, q.Limit) > largeEvents {
		if err := turn.grow(); err != nil {
			return nil, err
		}
	}
	return rd.receiptEvents(ctx, r, q.Types, after, q.Limit)
}

// sizeRead takes a large read's place in turn for a page by type (or of
// every type) when it is one: it may return more than largeEvents events,
// or its filters look through more than largeScan events of the log (past
// what the type index holds, for a page by type), as the logs' last
// sequences (at most tailAge old) say.
func (rd *Reader) sizeRead(ctx context.Context, q EventQuery, after uint64, turn *readTurn) error {
	if turn == nil {
		return nil
	}
	t := rd.tails.events
	if q.Synthetic {
		t = rd.tails.synthetic
	}
	last, err := t.last(ctx)
	if err != nil {
		return err
	}
	var span uint64
	if last > after {
		span = last - after
	}
	scan := span
	if !q.Synthetic && rd.indexed() {
		// The type index finds the events it holds: only the log after
		// them is looked through.
		held := rd.p.TypeIndex.Through()
		scan = 0
		if from := max(after, held); last > from {
			scan = last - from
		}
	}
	filters := uint64(max(1, len(slices.Compact(slices.Sorted(slices.Values(q.Types))))))
	if min(span, uint64(q.Limit)) > largeEvents || scan*filters > largeScan {
		return turn.grow()
	}
	return nil
}

// receiptEvents reads the events a receipt lists after sequence after, of
// the given types (all when empty), at most limit. The event log keeps
// its events forever (streams.eventMaxAge is 0), so an event a receipt
// lists that the store answers "not found" for is one it cannot serve yet
// (a new leader still applying what it was sent): errs.ErrUnavailable,
// for the caller to ask again, never a page or trace without it.
func (rd *Reader) receiptEvents(ctx context.Context, r *projection.Receipt, types []string, after uint64, limit int) ([]*bus.Message, error) {
	want := map[string]bool{}
	for _, t := range types {
		want[t] = true
	}
	var out []*bus.Message
	size := 0
	for _, seq := range r.Events {
		if seq <= after {
			continue
		}
		m, err := rd.p.Events.Get(ctx, seq)
		if errors.Is(err, errs.ErrNotFound) {
			return nil, fmt.Errorf("event %d of a receipt: %w", seq, errs.ErrUnavailable)
		}
		if err != nil {
			return nil, err
		}
		if _, _, _, typ, _ := rd.subj.ParseEvent(m.Subject); len(want) > 0 && !want[typ] {
			continue
		}
		out, size = append(out, m), size+len(m.Data)
		if len(out) == limit || size >= bus.RangeBytes {
			break
		}
	}
	return out, nil
}

func (rd *Reader) eventsByType(ctx context.Context, tenant string, q EventQuery, after uint64) ([]*bus.Message, uint64, error) {
	root, log := bus.RootEvents, rd.p.Events
	if q.Synthetic {
		root, log = bus.RootSynthetic, rd.p.Synthetic
	}
	var filters []string
	seen := map[string]bool{}
	for _, t := range q.Types {
		if !seen[t] {
			seen[t] = true
			filters = append(filters, rd.subj.EventsOfType(root, tenant, t))
		}
	}
	if len(filters) == 0 {
		filters = []string{rd.subj.TenantEvents(root, tenant)}
	}
	if q.Synthetic || !rd.indexed() {
		return rd.eventsByLog(ctx, log, root, tenant, q, filters, seen, after)
	}
	// The type index holds the events up to some sequence; the log after
	// it (the few events it has not taken in yet) is read by filter.
	out, from, ended, err := rd.eventsByIndex(ctx, tenant, q.Types, after, q.Limit)
	if err != nil || ended || len(out) >= q.Limit {
		return out, 0, err
	}
	rest := q
	rest.Limit -= len(out)
	more, upTo, err := rd.eventsByLog(ctx, log, root, tenant, rest, filters, seen, from)
	if err != nil {
		return nil, 0, err
	}
	if len(more) == 0 {
		upTo = max(upTo, from)
	}
	// The log's read has a bound of its own: the page keeps to one.
	size := bus.PayloadBytes(out)
	for i, m := range more {
		if size >= bus.RangeBytes {
			return append(out, more[:i]...), 0, nil // the page ends at its last event
		}
		size += len(m.Data)
	}
	return append(out, more...), upTo, nil
}

// indexed reports whether reads use the type index.
func (rd *Reader) indexed() bool {
	return rd.p.TypeIndex != nil
}

// eventsByLog is eventsByType read from the event log alone, by subject
// filters (one per type in want, or the tenant's events).
func (rd *Reader) eventsByLog(ctx context.Context, log bus.Log, root, tenant string, q EventQuery, filters []string, want map[string]bool, after uint64) ([]*bus.Message, uint64, error) {
	if len(filters) == 1 {
		// One filter reads a gap-free prefix of its matches: the page ends
		// at its last event.
		ms, err := log.Range(ctx, filters[0], after+1, q.Limit)
		return ms, 0, err
	}
	// Several types are read from the tenant's events while they make up
	// a good part of them, then each on its own.
	out, upTo, from, err := rd.scanTypes(ctx, log, root, tenant, want, after, q.Limit)
	if err != nil || from == 0 {
		return out, upTo, err
	}
	more, upTo, err := mergeFilters(ctx, log, filters, from, q.Limit-len(out), bus.RangeBytes-bus.PayloadBytes(out))
	if err != nil {
		return nil, 0, err
	}
	return append(out, more...), upTo, nil
}

// minScanShare is the smallest share of a tenant's events the types of a
// page must make up for scanTypes to keep reading them from all the
// tenant's events.
const minScanShare = 4 // one in four

// scanTypes reads the tenant's events of the types in want after sequence
// after from all the tenant's events, at most limit of them (and about
// bus.RangeBytes), while they make up at least 1/minScanShare of what it
// reads: one request then costs the server about what one type's does,
// and a page of types that are much of the log takes a few requests rather
// than one per type and more. It returns the page and its cursor as
// eventsByType does, and from 0 — or, when the types turned out rarer,
// the page so far and from, the sequence every event up to which was read,
// for the types to be read on their own from there.
func (rd *Reader) scanTypes(ctx context.Context, log bus.Log, root, tenant string, want map[string]bool, after uint64, limit int) ([]*bus.Message, uint64, uint64, error) {
	filter := rd.subj.TenantEvents(root, tenant)
	var out []*bus.Message
	size := 0
	for reads := 0; ; reads++ {
		ask := min(maxScanBatch, minScanShare*(limit-len(out)))
		if reads == 0 {
			ask = min(ask, firstScanBatch) // a small first look, in case the types are rare
		}
		ms, err := log.Range(ctx, filter, after+1, ask)
		if err != nil {
			return nil, 0, 0, err
		}
		kept := 0
		for _, m := range ms {
			if !want[rd.typeOf(root, tenant, m.Subject)] {
				continue
			}
			out, size, kept = append(out, m), size+len(m.Data), kept+1
			if len(out) == limit || size >= bus.RangeBytes {
				return out, 0, 0, nil // the page ends at its last event
			}
		}
		if !bus.Full(ms, ask) {
			// Every event of the tenant is read: the cursor goes past the
			// last one, whatever its type.
			var upTo uint64
			if n := len(ms); n > 0 {
				upTo = ms[n-1].Seq
			}
			return out, upTo, 0, nil
		}
		after = ms[len(ms)-1].Seq
		if kept*minScanShare < len(ms) {
			return out, 0, after, nil
		}
	}
}

// firstScanBatch and maxScanBatch bound the first and the other reads of
// scanTypes.
const (
	firstScanBatch = 256
	maxScanBatch   = 1024
)

// typeOf returns the event type of a subject of a tenant's events under
// root (its last token), or "" for a subject a type filter would not
// match.
func (rd *Reader) typeOf(root, tenant, subject string) string {
	if t, typ, ok := rd.subj.TypedEvent(root, subject); ok && t == tenant {
		return typ
	}
	return ""
}

// maxMergeReads bounds the reads of one page of several filters, and
// minMergeChunk is the fewest events each asks for.
const (
	maxMergeReads = 256
	minMergeChunk = 16
)

// mergeFilters reads the events matching any of filters after sequence
// after, in stream order, at most limit of them (and about maxBytes),
// without reading much more than it returns: each filter is read a chunk
// at a time — first the page shared out among the filters, then, for the
// filters the page waits for, what their density so far says the rest of
// the page needs of them — and only the filters the page waits for are
// read again. Every read is a request whose fixed cost on the server grows
// with the log after the cursor, so the chunks aim at one more round, not
// at reading nothing more than needed. Each filter's
// reads are complete up to their last event when full (bus.Full), else up
// to the stream's last sequence as it was before the reads (or their last
// event, if later): the page, and the cursor, may not go past the lowest
// of these, or an event written between two reads could be skipped. A
// page cut short ends at its last event; otherwise the cursor (the second
// result) is where every filter's reads are complete.
func mergeFilters(ctx context.Context, log bus.Log, filters []string, after uint64, limit, maxBytes int) ([]*bus.Message, uint64, error) {
	snapshot, err := log.LastSeq(ctx)
	if err != nil {
		return nil, 0, err
	}
	type source struct {
		filter  string
		through uint64         // every match up to here is read
		read    int            // matches read
		done    bool           // no match after through, as of snapshot
		held    []*bus.Message // read, not yet on the page, in order
	}
	srcs := make([]*source, len(filters))
	for i, f := range filters {
		srcs[i] = &source{filter: f, through: after}
	}
	var out []*bus.Message
	size := 0
	for reads := 0; ; {
		// The page may take every held event up to the lowest point the
		// sources are read through.
		bound := uint64(math.MaxUint64)
		for _, sr := range srcs {
			bound = min(bound, sr.through)
		}
		for len(out) < limit && size < maxBytes {
			var next *source
			for _, sr := range srcs {
				if len(sr.held) > 0 && sr.held[0].Seq <= bound && (next == nil || sr.held[0].Seq < next.held[0].Seq) {
					next = sr
				}
			}
			if next == nil {
				break
			}
			m := next.held[0]
			next.held = next.held[1:]
			out, size = append(out, m), size+len(m.Data)
		}
		if len(out) == limit || size >= maxBytes {
			return out, 0, nil
		}
		// Read on the sources the page waits for: those read through no
		// further than bound (with nothing held past it) and not done.
		var behind []*source
		open := 0
		for _, sr := range srcs {
			if !sr.done {
				open++
				if sr.through == bound {
					behind = append(behind, sr)
				}
			}
		}
		if len(behind) == 0 || reads >= maxMergeReads {
			if len(behind) > 0 && len(out) > 0 {
				return out, 0, nil // cut short: the page ends at its last event
			}
			return out, max(bound, after), nil
		}
		need := limit - len(out)
		// Matches per sequence of each open filter so far, and the stretch
		// after bound the rest of the page should take at those rates.
		var density float64
		for _, sr := range srcs {
			if !sr.done && sr.through > after {
				density += float64(sr.read) / float64(sr.through-after)
			}
		}
		for _, sr := range behind {
			chunk := max(minMergeChunk, (need+open-1)/open) // the first round: the page shared out
			if sr.through > after && density > 0 {
				rate := float64(sr.read) / float64(sr.through-after)
				chunk = max(minMergeChunk, min(need, int(math.Ceil(1.25*rate*float64(need)/density))+8))
			}
			ms, err := log.Range(ctx, sr.filter, sr.through+1, chunk)
			if err != nil {
				return nil, 0, err
			}
			reads++
			sr.read += len(ms)
			sr.held = append(sr.held, ms...)
			if bus.Full(ms, chunk) {
				sr.through = ms[len(ms)-1].Seq
				continue
			}
			sr.through, sr.done = snapshot, true
			if n := len(ms); n > 0 {
				sr.through = max(snapshot, ms[n-1].Seq)
			}
		}
	}
}

// Event reads m, a message of the event log, as every listener of the
// log reads it (its subject's tokens and headers).
func (rd *Reader) Event(m *bus.Message) *bus.Event { return bus.NewEvent(rd.subj, m) }

// Servable reports whether a stored event can be served as it is: a JSON
// object, as every envelope is. The event stream also takes what services
// publish straight to NATS, which may be anything; such a message is left
// out of pages and traces (the cursor still moves past it) with a warning,
// rather than failing every page that covers it.
func (rd *Reader) Servable(m *bus.Message) bool {
	if bus.JSONObject(m.Data) {
		return true
	}
	if prev := rd.unservedUpTo.Load(); m.Seq > prev && rd.unservedUpTo.CompareAndSwap(prev, m.Seq) {
		rd.log.Warn("an event that is not a JSON object is left out of reads", "subject", m.Subject, "seq", m.Seq, "bytes", len(m.Data))
	}
	return false
}
