package app

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// EventQuery selects events of one tenant. The zero value lists everything
// from the start, a default-sized page.
type EventQuery struct {
	Types         []string
	CorrelationID string
	After         string // cursor from a previous page's Next
	Limit         int
	// Synthetic reads injected events instead of production ones.
	Synthetic bool
}

// EventPage is one page of events in stream order. Next is the cursor to
// pass as After for the following page; it is always set, so a poller can
// keep asking for what comes next.
type EventPage struct {
	Events []json.RawMessage `json:"events"`
	Next   string            `json:"next"`
}

// ParseEventQuery checks raw query values and returns the query, or a
// VALIDATION_FAILED error naming every bad parameter.
func (a *App) ParseEventQuery(types []string, correlationID, after, limit string) (EventQuery, error) {
	q := EventQuery{Types: types, CorrelationID: correlationID, After: after, Limit: a.cfg.PageDefault}
	var v []errs.Violation
	for _, t := range types {
		if !envelope.ValidType(t) {
			v = append(v, errs.Violation{Path: "type", Message: strconv.Quote(t) + " is not a PascalCase event type"})
		}
	}
	if after != "" {
		if _, err := strconv.ParseUint(after, 10, 64); err != nil {
			v = append(v, errs.Violation{Path: "after", Message: "must be a cursor returned as next"})
		}
	}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > a.cfg.PageMax {
			v = append(v, errs.Violation{Path: "limit", Message: "must be an integer from 1 to " + strconv.Itoa(a.cfg.PageMax)})
		}
		q.Limit = n
	}
	if correlationID != "" && (len(correlationID) > 128 || !envelope.ValidTokenID(correlationID)) {
		v = append(v, errs.Violation{Path: "correlationId", Message: "must be an id returned by POST /commands"})
	}
	if len(v) > 0 {
		return q, errs.Invalid("invalid query parameters", v)
	}
	return q, nil
}

// ListEvents returns a page of tenant's events matching q, in stream order.
// Lookups by correlation id use the receipt index; type filters use the
// subject index; neither scans the stream.
func (a *App) ListEvents(ctx context.Context, tenant string, q EventQuery) (*EventPage, error) {
	var after uint64
	if q.After != "" {
		after, _ = strconv.ParseUint(q.After, 10, 64)
	}
	if q.Limit <= 0 {
		q.Limit = a.cfg.PageDefault
	}
	var msgs []*bus.Message
	var err error
	switch {
	case q.CorrelationID != "" && !q.Synthetic:
		msgs, err = a.eventsOfCommand(ctx, tenant, q, after)
	default:
		msgs, err = a.eventsByType(ctx, tenant, q, after)
	}
	if err != nil {
		return nil, errs.Internal(err)
	}
	page := &EventPage{Events: make([]json.RawMessage, len(msgs)), Next: strconv.FormatUint(after, 10)}
	for i, m := range msgs {
		page.Events[i] = m.Data
		page.Next = strconv.FormatUint(m.Seq, 10)
	}
	return page, nil
}

func (a *App) eventsOfCommand(ctx context.Context, tenant string, q EventQuery, after uint64) ([]*bus.Message, error) {
	r, err := a.Receipt(ctx, tenant, q.CorrelationID)
	if errors.Is(err, errs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, t := range q.Types {
		want[t] = true
	}
	var out []*bus.Message
	for _, seq := range r.Events {
		if seq <= after {
			continue
		}
		m, err := a.p.Events.Get(ctx, seq)
		if errors.Is(err, errs.ErrNotFound) {
			continue // aged out of the stream
		}
		if err != nil {
			return nil, err
		}
		if _, _, _, typ, _ := a.subj.ParseEvent(m.Subject); len(want) > 0 && !want[typ] {
			continue
		}
		out = append(out, m)
		if len(out) == q.Limit {
			break
		}
	}
	return out, nil
}

func (a *App) eventsByType(ctx context.Context, tenant string, q EventQuery, after uint64) ([]*bus.Message, error) {
	root, log := RootEvents, a.p.Events
	if q.Synthetic {
		root, log = RootSynthetic, a.p.Synthetic
	}
	filters := []string{a.subj.TenantEvents(root, tenant)}
	if len(q.Types) > 0 {
		filters = filters[:0]
		seen := map[string]bool{}
		for _, t := range q.Types {
			if !seen[t] {
				seen[t] = true
				filters = append(filters, a.subj.EventsOfType(root, tenant, t))
			}
		}
	}
	var out []*bus.Message
	for _, f := range filters {
		ms, err := log.Range(ctx, f, after+1, q.Limit)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	if len(filters) > 1 {
		sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
		if len(out) > q.Limit {
			out = out[:q.Limit]
		}
	}
	if q.CorrelationID != "" { // synthetic events have no receipts: filter the page
		kept := out[:0]
		for _, m := range out {
			if m.Header.Get(bus.HeaderCorrelationID) == q.CorrelationID {
				kept = append(kept, m)
			}
		}
		out = kept
	}
	return out, nil
}
