package webhook

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/text"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/agentbus/agentbus/pkg/webhook/record"
	"github.com/agentbus/agentbus/pkg/webhook/send"
)

// Headers on dead letters.
const (
	HeaderSubscription = "Agentbus-Subscription"
	HeaderEventSeq     = "Agentbus-Event-Seq"
	HeaderError        = "Agentbus-Error"
)

// deadSubject is the subject of subscription id's dead letters.
func deadSubject(prefix, tenant, id string) string {
	return prefix + ".dlq." + tenant + "." + id
}

// settle tries the item once, applies the retry policy (send.Backoff.Next) to
// what happened: moves the worker's cursor (written by flush), disables the
// subscription, or dead-letters the item and marks the subscription
// failing; and sends the attempt's record, which says failed when the item
// was dead-lettered.
func (w *worker) settle(ctx context.Context, s *Subscription, it *item) {
	c := &w.cur
	d := w.d
	res := d.http.Attempt(ctx, send.Request{Tenant: s.Tenant, Subscription: s.ID, URL: s.URL,
		EventID: it.eventID, EventType: it.eventType, Header: it.m.Header, Body: it.m.Data})
	if ctx.Err() != nil {
		return // stopping: the attempt is not counted, the item comes again
	}
	w.dirty = true
	prior := w.priorRecord(it)
	if prior == nil {
		w.stored(ctx) // the record is read: what was sent of it first
	}
	status := record.Retrying
	done := func() {
		if it.deadSeq > 0 {
			c.Redelivered = it.deadSeq
		} else {
			c.Seq = it.eventSeq
		}
		c.Attempt, c.NextAt = 0, time.Time{}
	}
	step, wait := d.cfg.Backoff.Next(c.Attempt+1, res.Status, res.RetryAfter, d.rnd())
	switch step {
	case send.StepDelivered:
		status = record.Delivered
		done()
		if s.Failing && it.deadSeq == 0 {
			if err := d.p.Outcomes.Recovered(ctx, s.Tenant, s.ID, it.eventSeq); err != nil {
				d.log.Warn("webhooks: marking a subscription active again failed", "subscription", s.ID, "tenant", s.Tenant, "err", err)
			}
			recovered := *s
			recovered.Failing = false
			w.sub.CompareAndSwap(s, &recovered) // until the registry says so too
		}
	case send.StepDisable:
		reason := fmt.Sprintf("the receiver answered 410 Gone for event %s", it.eventID)
		if err := d.p.Outcomes.Disable(ctx, s.Tenant, s.ID, it.eventSeq, reason); err != nil {
			d.log.Warn("webhooks: disabling a subscription failed; trying again", "subscription", s.ID, "tenant", s.Tenant, "err", err)
			c.NextAt = d.now().Add(d.cfg.Scan)
			break
		}
		c.Gone, c.GoneAt, c.Attempt, c.NextAt = true, d.now(), 0, time.Time{}
	case send.StepRetry:
		c.Attempt++
		c.NextAt = d.now().Add(wait)
	default: // StepDeadLetter
		c.Attempt++
		reason := fmt.Sprintf("event %s not delivered after %d attempts: %s", it.eventID, c.Attempt, res.Summary())
		if err := d.deadLetter(ctx, s, it, reason); err != nil {
			d.log.Warn("webhooks: dead-lettering failed; trying again", "subscription", s.ID, "tenant", s.Tenant, "err", err)
			c.Attempt-- // the last attempt again, later
			c.NextAt = d.now().Add(d.cfg.Scan)
			break
		}
		status = record.Failed
		if err := d.p.Outcomes.Failing(ctx, s.Tenant, s.ID, it.eventSeq, reason); err != nil {
			d.log.Warn("webhooks: marking a subscription failing failed", "subscription", s.ID, "tenant", s.Tenant, "err", err)
		} else {
			failing := *s
			failing.Failing = true
			w.sub.CompareAndSwap(s, &failing) // until the registry says so too
		}
		done()
	}
	if o := d.p.Observer; o != nil {
		outcome := string(status)
		if step == send.StepDisable && c.Gone {
			outcome = "disabled"
		}
		o.Attempted(outcome, res.Latency)
		if status == record.Failed {
			o.DeadLettered()
		}
	}
	var sent *record.Sent
	w.rec, sent = d.p.Deliveries.Record(ctx,
		record.Of{Tenant: s.Tenant, Subscription: s.ID, EventID: it.eventID, EventType: it.eventType, EventSeq: it.eventSeq, Correlation: it.corr},
		record.Attempt{At: res.At.UTC(), StatusCode: res.Status, LatencyMS: float64(res.Latency.Microseconds()) / 1000, Error: res.Err, Response: res.Response},
		prior, status)
	if sent != nil {
		w.sent = append(w.sent, sent)
	}
}

// priorRecord returns what is known of the item's delivery record before
// this attempt: the worker's copy, nothing for an event tried for the
// first time, else nil to read it (after a restart, say).
func (w *worker) priorRecord(it *item) *record.Delivery {
	switch {
	case w.rec != nil && w.rec.EventSeq == it.eventSeq && w.rec.Subscription == w.sub.Load().ID:
		return w.rec
	case w.cur.Attempt == 0 && it.deadSeq == 0:
		return &record.Delivery{}
	}
	return nil
}

func (d *Dispatcher) deadLetter(ctx context.Context, s *Subscription, it *item, reason string) error {
	m := &bus.Message{Subject: deadSubject(d.cfg.Prefix, s.Tenant, s.ID), Data: it.m.Data, Header: bus.Header{
		HeaderSubscription: {s.ID},
		HeaderEventSeq:     {strconv.FormatUint(it.eventSeq, 10)},
		HeaderError:        {text.Cut(reason, 512)},
	}}
	if it.corr != "" {
		m.Header.Set(bus.HeaderCorrelationID, it.corr)
	}
	// A redelivery of the dead letter goes on in the event's trace.
	for _, k := range []string{tracing.HeaderTraceParent, tracing.HeaderTraceState} {
		if v := it.m.Header.Get(k); v != "" {
			m.Header.Set(k, v)
		}
	}
	_, err := d.p.DeadLetters.Append(ctx, []*bus.Message{m}, nil)
	return err
}
