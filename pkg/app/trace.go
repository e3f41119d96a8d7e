package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// StatusProcessing is a trace status: the command was delivered to a
// processor (agentbus's own or a registered agent's consumer) and no outcome
// is recorded yet.
const StatusProcessing = "processing"

// Trace is the life of one command.
type Trace struct {
	ID      string       `json:"id"` // the correlation id
	Command TraceCommand `json:"command"`
	// Status is accepted, processing, processed or rejected.
	Status    string     `json:"status"`
	Rejection *Rejection `json:"rejection,omitempty"`
	// Events are the envelopes the command caused, in stream order.
	Events []json.RawMessage `json:"events"`
	// Deliveries are the webhook deliveries of those events: none until
	// agentbus delivers webhooks.
	Deliveries []any     `json:"deliveries"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// TraceCommand is what a trace says of the command itself.
type TraceCommand struct {
	ID       string `json:"id,omitempty"` // the envelope id the sender chose
	Type     string `json:"type,omitempty"`
	Source   string `json:"source,omitempty"`
	Time     string `json:"time,omitempty"`
	Sequence uint64 `json:"sequence,omitempty"` // in the command log
}

// maxTraceEvents bounds the events a trace lists.
const maxTraceEvents = 1000

// GetTrace returns the trace of a command of tenant by correlation id, from
// its receipt, the event log and, when set, the deliveries source. It
// returns TRACE_NOT_FOUND for an id with no receipt (never submitted, or
// older than the receipt TTL).
func (a *App) GetTrace(ctx context.Context, tenant, corr string) (*Trace, error) {
	if !envelope.ValidTokenID(corr) {
		return nil, errs.Invalid("invalid trace id", []errs.Violation{{Path: "id", Message: "must be an id returned by POST /commands ([A-Za-z0-9_-]{1,128})"}})
	}
	notFound := errs.New(errs.CodeTraceNotFound, "no command with correlation id %q", corr)
	r, err := a.Receipt(ctx, tenant, corr)
	if errors.Is(err, errs.ErrNotFound) {
		// A command processed here has a receipt once processed; until then
		// it is among the processor's pending commands.
		done, ferr := a.scanTurn(ctx)
		if ferr != nil {
			return nil, ferr
		}
		seq, ferr := a.findPending(ctx, a.subj.TenantCommands(tenant), corr)
		done()
		if ferr != nil {
			return nil, errs.Internal(ferr) // not knowing is not "not found"
		}
		if seq == 0 {
			return nil, notFound
		}
		r, err = &Receipt{CorrelationID: corr, Tenant: tenant, Status: StatusAccepted, CommandSeq: seq}, nil
	}
	if err != nil {
		return nil, errs.Internal(err)
	}
	t := &Trace{ID: corr, Status: r.Status, Rejection: r.Rejection, Events: []json.RawMessage{}, Deliveries: []any{}, UpdatedAt: r.UpdatedAt,
		Command: TraceCommand{ID: r.CommandID, Type: r.Type, Source: r.Source, Time: r.Time, Sequence: r.CommandSeq}}
	msgs, err := a.receiptEvents(ctx, r, nil, 0, maxTraceEvents)
	if err != nil {
		return nil, errs.Internal(err)
	}
	for _, m := range msgs {
		if a.servable(m) {
			t.Events = append(t.Events, m.Data)
		}
	}
	if (t.Command.ID == "" || t.Command.Type == "") && r.CommandSeq > 0 {
		a.fillCommand(ctx, tenant, corr, &t.Command)
	}
	if t.Status == StatusAccepted && t.Command.Sequence > 0 && a.delivered(ctx, tenant, t.Command.Type, t.Command.Sequence) { // the receipt's, unless fillCommand found it was not this command's
		t.Status = StatusProcessing
	}
	return t, nil
}

// delivered reports whether a consumer that processes commands of typ has
// delivered the command at seq: agentbus's processor for the types it
// processes, else the consumers of the tenant's agents accepting typ.
// External processors' consumers are not known, so their commands show as
// accepted until their first event.
func (a *App) delivered(ctx context.Context, tenant, typ string, seq uint64) bool {
	if a.p.Consumers == nil {
		return false
	}
	var names []string
	if _, ok := a.deciders[typ]; ok {
		names = append(names, ProcessorConsumer)
	} else {
		a.ctl.agents.each(tenant, func(ag Agent) bool {
			if slices.Contains(ag.Accepts, typ) {
				names = append(names, AgentConsumerName(tenant, ag.ID))
			}
			return len(names) < 16
		})
	}
	for _, n := range names {
		if st, err := a.p.Consumers.Consumer(ctx, n); err == nil && st.Delivered >= seq {
			return true
		}
	}
	return false
}

func (a *App) opTrace(ctx context.Context, r *Request) (*Response, error) {
	t, err := a.GetTrace(ctx, r.Tenant, r.Path["id"])
	if err != nil {
		return nil, err
	}
	return &Response{Status: http.StatusOK, Body: t}, nil
}

// fillCommand completes a trace's command from the command log, for
// receipts written from events alone (commands agentbus processes itself).
func (a *App) fillCommand(ctx context.Context, tenant, corr string, c *TraceCommand) {
	if a.p.Commands == nil {
		return
	}
	m, err := a.p.Commands.Get(ctx, c.Sequence)
	if err != nil {
		return // aged out: the trace shows what the receipt has
	}
	// The sequence comes from an event's header, which any publisher
	// writes: only the command that is this one — this tenant's, deriving
	// this correlation id — fills the trace.
	env, ok := a.storedCommand(m, tenant, corr)
	if !ok {
		c.Sequence = 0
		return
	}
	c.ID, c.Source, c.Time = env.ID, env.Source, env.Time
	if c.Type == "" {
		c.Type = env.Type
	}
}
