package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/pushlog"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// StatusProcessing is a trace status: the command was delivered to a
// processor (agentbus's own or a registered agent's consumer) and no outcome
// is recorded yet.
const StatusProcessing = "processing"

// Trace is the life of one command.
type Trace struct {
	ID string `json:"id"` // the correlation id
	// TraceID is the OpenTelemetry trace id the command's events carry
	// (their traceparent header, from the request that submitted it);
	// "" when it came without one.
	TraceID string       `json:"traceId,omitempty"`
	Command TraceCommand `json:"command"`
	// Status is accepted, processing, processed or rejected.
	Status    string                `json:"status"`
	Rejection *projection.Rejection `json:"rejection,omitempty"`
	// Events are the envelopes the command caused, in stream order.
	Events []json.RawMessage `json:"events"`
	// Deliveries are the webhook deliveries of those events
	// (DeliveryRecord: subscription, event, status, attempts).
	Deliveries []any `json:"deliveries"`
	// Pushes are the pushes of those events to live listeners (SSE
	// streams, MCP sessions, A2A task streams) by time, as far as the
	// replicas keep them: in memory, for the last commands pushed
	// (pushlog), never persisted.
	Pushes []pushlog.Record `json:"pushes"`
	// PushesOmitted counts the pushes past those a command keeps.
	PushesOmitted int       `json:"pushesOmitted,omitempty"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

// TraceCommand is what a trace says of the command itself.
type TraceCommand struct {
	ID     string `json:"id,omitempty"` // the envelope id the sender chose
	Type   string `json:"type,omitempty"`
	Source string `json:"source,omitempty"`
	Time   string `json:"time,omitempty"`
	// Sequence is the command's in the command log, which every tenant
	// shares: it is not shown.
	Sequence uint64 `json:"-"`
}

// maxTraceEvents bounds the events a trace lists.
const maxTraceEvents = 1000

// GetTrace returns the trace of a command of tenant by correlation id, from
// its receipt, the event log and, when set, the deliveries source. It
// returns TRACE_NOT_FOUND for an id with no receipt (never submitted, or
// older than the receipt TTL) and no pending command; a command processed
// between those two looks is found once the receipts projection has caught
// up with the event log (waiting a few seconds at most). It is not
// bounded: see GetTraceFor.
func (rd *Reader) GetTrace(ctx context.Context, tenant, corr string) (*Trace, error) {
	return rd.getTrace(ctx, tenant, corr, nil)
}

// getTrace is GetTrace taking a large read's place in turn when the
// command caused more than largeEvents events.
func (rd *Reader) getTrace(ctx context.Context, tenant, corr string, turn *readTurn) (*Trace, error) {
	if !envelope.ValidTokenID(corr) {
		return nil, errs.Invalid("invalid trace id", []errs.Violation{{Path: "id", Message: "must be an id returned by POST /commands ([A-Za-z0-9_-]{1,128})"}})
	}
	notFound := errs.New(errs.CodeTraceNotFound, "no command with correlation id %q", corr)
	r, err := rd.p.Receipts.Get(ctx, tenant, corr)
	if errors.Is(err, errs.ErrNotFound) {
		// A command processed here has a receipt once processed; until then
		// it is among the processor's pending commands.
		done, ferr := rd.scanTurn(ctx)
		if ferr != nil {
			return nil, ferr
		}
		seq, ferr := rd.p.Pending.Find(ctx, rd.subj.TenantCommands(tenant), corr)
		done()
		if ferr != nil {
			return nil, errs.Internal(ferr) // not knowing is not "not found"
		}
		switch {
		case seq > 0:
			r, err = &projection.Receipt{CorrelationID: corr, Tenant: tenant, Status: projection.StatusAccepted, CommandSeq: seq}, nil
		case rd.p.Receipts.Current(ctx) == nil:
			// Processed since the receipt was read (no longer pending),
			// its receipt projected by now, or never submitted.
			if r, err = rd.p.Receipts.Get(ctx, tenant, corr); errors.Is(err, errs.ErrNotFound) {
				return nil, notFound
			}
		default:
			return nil, notFound
		}
	}
	if err != nil {
		return nil, errs.Internal(err)
	}
	t := &Trace{ID: corr, Status: r.Status, Rejection: r.Rejection, Events: []json.RawMessage{}, Deliveries: []any{}, UpdatedAt: r.UpdatedAt,
		Command: TraceCommand{ID: r.CommandID, Type: r.Type, Source: r.Source, Time: r.Time, Sequence: r.CommandSeq}}
	if len(r.Events) > largeEvents {
		if err := turn.grow(); err != nil {
			return nil, err
		}
	}
	msgs, err := rd.receiptEvents(ctx, r, nil, 0, maxTraceEvents)
	if err != nil {
		return nil, errs.Internal(err)
	}
	for _, m := range msgs {
		if t.TraceID == "" {
			t.TraceID = tracing.TraceID(m.Header)
		}
		if rd.Servable(m) {
			t.Events = append(t.Events, m.Data)
		}
	}
	if (t.Command.ID == "" || t.Command.Type == "") && r.CommandSeq > 0 {
		rd.fillCommand(ctx, tenant, corr, &t.Command)
	}
	if len(t.Events) > 0 {
		if t.Deliveries, err = rd.deliveriesOf(ctx, tenant, corr); err != nil {
			return nil, errs.Internal(err)
		}
	}
	t.Pushes, t.PushesOmitted = rd.p.Pushes.Of(tenant, corr)
	t.Pushes = pushesOfEvents(t.Pushes, t.Events)
	if t.Status == projection.StatusAccepted && t.Command.Sequence > 0 && rd.delivered(ctx, tenant, t.Command.Type, t.Command.Sequence) { // the receipt's, unless fillCommand found it was not this command's
		t.Status = StatusProcessing
	}
	return t, nil
}

// delivered reports whether a consumer that processes commands of typ has
// delivered the command at seq: agentbus's processor for the types it
// processes, else the consumers of the tenant's agents accepting typ.
// External processors' consumers are not known, so their commands show as
// accepted until their first event.
func (rd *Reader) delivered(ctx context.Context, tenant, typ string, seq uint64) bool {
	var names []string
	if rd.p.ControlPlane.Processes(typ) {
		names = append(names, bus.ProcessorConsumer)
	} else {
		rd.p.Registries.Agents.Each(tenant, func(ag decide.Agent) bool {
			if slices.Contains(ag.Accepts, typ) {
				names = append(names, bus.AgentConsumer(tenant, ag.ID))
			}
			return len(names) < 16
		})
	}
	for _, n := range names {
		if st, err := rd.p.CommandConsumers.Consumer(ctx, n); err == nil && st.Delivered >= seq {
			return true
		}
	}
	return false
}

// GetTraceFor is GetTrace with the read bounded as caller's (the
// credential's id; "" is not bounded): past a bound it returns
// RATE_LIMITED at once (readgate.go).
func (rd *Reader) GetTraceFor(ctx context.Context, caller, tenant, corr string) (*Trace, error) {
	turn, err := rd.reads.enter(caller)
	if err != nil {
		return nil, err
	}
	defer turn.end()
	return rd.getTrace(ctx, tenant, corr, turn)
}

// deliveriesOf returns the webhook deliveries of a command's events, for
// its trace.
func (rd *Reader) deliveriesOf(ctx context.Context, tenant, corr string) ([]any, error) {
	recs, err := rd.p.Deliveries.OfCommand(ctx, tenant, corr)
	if err != nil {
		return nil, fmt.Errorf("deliveries of %s: %w", corr, err)
	}
	out := make([]any, len(recs))
	for i, r := range rd.DeliveryRecords(tenant, recs) {
		out[i] = r
	}
	return out, nil
}

// fillCommand completes a trace's command from the command log, for
// receipts written from events alone (commands agentbus processes itself).
func (rd *Reader) fillCommand(ctx context.Context, tenant, corr string, c *TraceCommand) {
	m, err := rd.p.Commands.Get(ctx, c.Sequence)
	if err != nil {
		return // aged out: the trace shows what the receipt has
	}
	// The sequence comes from an event's header, which any publisher
	// writes: only the command that is this one — this tenant's, deriving
	// this correlation id — fills the trace.
	env, ok := decide.StoredCommand(rd.subj, m, tenant, corr)
	if !ok {
		c.Sequence = 0
		return
	}
	c.ID, c.Source, c.Time = env.ID, env.Source, env.Time
	if c.Type == "" {
		c.Type = env.Type
	}
}

// maxScans bounds the scans for traces running at once, and scanWait how
// long a trace waits for its turn.
const (
	maxScans = 4
	scanWait = 5 * time.Second
)

// scanTurn waits, at most scanWait, for one of the maxScans turns to scan
// the pending commands for a caller: any caller can ask for a scan (the
// trace of an unknown id costs a whole one). It returns the function that
// ends the turn, or a SERVICE_UNAVAILABLE error saying so.
func (rd *Reader) scanTurn(ctx context.Context) (func(), error) {
	ctx, cancel := context.WithTimeout(ctx, scanWait)
	defer cancel()
	select {
	case rd.scans <- struct{}{}:
		return func() { <-rd.scans }, nil
	case <-ctx.Done():
		return nil, errs.Unavailable("too many trace lookups at once; retry shortly")
	}
}

// pushesOfEvents keeps the pushes of the events a trace lists: a record
// naming another event is not one a replica made (anyone allowed to
// publish on the pushes subject can send records), and is left out.
func pushesOfEvents(pushes []pushlog.Record, events []json.RawMessage) []pushlog.Record {
	if len(pushes) == 0 {
		return pushes
	}
	ids := make(map[string]bool, len(events))
	for _, raw := range events {
		var e struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(raw, &e) == nil {
			ids[e.ID] = true
		}
	}
	kept := pushes[:0]
	for _, p := range pushes {
		if ids[p.EventID] {
			kept = append(kept, p)
		}
	}
	return kept
}
