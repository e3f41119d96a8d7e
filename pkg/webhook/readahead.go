package webhook

import (
	"context"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/bus"
)

// readAhead is how many events one read of the log takes (one while the
// next is being retried, so a worker waiting on a receiver that is down
// holds one event), up to about readAheadBytes of payload.
const (
	readAhead      = 32
	readAheadBytes = 256 << 10
)

// item is one thing to deliver: an event, or a dead letter again.
type item struct {
	m         *bus.Message // the event as stored (or as dead-lettered)
	eventSeq  uint64       // in the event log
	deadSeq   uint64       // in the dead-letter log, when redelivered
	eventID   string
	corr      string
	eventType string
}

// next returns the next item after c, or nil when there is none now. When
// no dead letter is left to redeliver it moves c.Redelivered up to
// c.Redeliver (the caller saves that).
func (w *worker) next(ctx context.Context, s *Subscription, c *cursor) (*item, error) {
	d := w.d
	if c.Redelivered < c.Redeliver {
		msgs, err := d.p.DeadLetters.Range(ctx, deadSubject(d.cfg.Prefix, s.Tenant, s.ID), c.Redelivered+1, 1)
		if err != nil {
			return nil, err
		}
		if len(msgs) > 0 && msgs[0].Seq <= c.Redeliver {
			m := msgs[0]
			seq, _ := strconv.ParseUint(m.Header.Get(HeaderEventSeq), 10, 64)
			return d.itemOf(m, seq, m.Seq), nil
		}
		c.Redelivered = c.Redeliver
	}
	for len(w.ahead) > 0 && w.ahead[0].eventSeq <= c.Seq {
		w.ahead = w.ahead[1:] // settled
	}
	if len(w.ahead) > 0 {
		return w.ahead[0], nil
	}
	filters := []string{d.subj.TenantEvents(bus.RootEvents, s.Tenant)}
	if len(s.Types) > 0 {
		filters = filters[:0]
		for _, t := range s.Types {
			filters = append(filters, d.subj.EventsOfType(bus.RootEvents, s.Tenant, t))
		}
	}
	n := readAhead
	if c.Attempt > 0 {
		n = 1 // retrying: hold the one event, not a run behind it
	}
	if d.recent != nil {
		// The events followed last hold every event after the cursor, or
		// some of them: the next items, in order, without a read. Where a
		// search with the same filters found nothing, the next starts.
		key := strings.Join(filters, " ")
		if key != w.skipFor || c.Seq < w.skipFrom {
			w.skip, w.skipFor = 0, key // other filters, or a cursor moved back
		}
		its, last, held := d.recent.after(c.Seq, w.skip, filters, n, readAheadBytes)
		if len(its) > 0 {
			w.ahead = append(w.ahead, its...)
			return w.ahead[0], nil
		}
		if held {
			if w.skip == 0 {
				w.skipFrom = c.Seq
			}
			w.skip = last
			if d.now().Sub(w.readAt) < d.cfg.Lease {
				// Nothing followed yet: the follow nudges this worker when
				// there is. The log is read anyway once a lease (15 s),
				// should the follow lag.
				return nil, nil
			}
		}
	}
	w.readAt = d.now()
	if len(filters) == 1 {
		// One filter reads a run of its matches ahead: they are the next
		// items, in order, until the cursor moves elsewhere.
		msgs, err := d.p.Events.Range(ctx, filters[0], c.Seq+1, n)
		if err != nil || len(msgs) == 0 {
			return nil, err
		}
		size := 0
		for _, m := range msgs {
			if size += len(m.Data); size > readAheadBytes && len(w.ahead) > 0 {
				break // large events: hold fewer
			}
			w.ahead = append(w.ahead, d.itemOf(m, m.Seq, 0))
		}
		return w.ahead[0], nil
	}
	var first *bus.Message
	for _, f := range filters {
		msgs, err := d.p.Events.Range(ctx, f, c.Seq+1, 1)
		if err != nil {
			return nil, err
		}
		if len(msgs) > 0 && (first == nil || msgs[0].Seq < first.Seq) {
			first = msgs[0]
		}
	}
	if first == nil {
		return nil, nil
	}
	return d.itemOf(first, first.Seq, 0), nil
}

func (d *Dispatcher) itemOf(m *bus.Message, eventSeq, deadSeq uint64) *item {
	id, typ, _ := (&bus.Event{Message: m}).Envelope()
	return newItem(m, eventSeq, deadSeq, id, typ)
}

// newItem is the item of m, whose envelope's id and type are id and typ.
func newItem(m *bus.Message, eventSeq, deadSeq uint64, id, typ string) *item {
	it := &item{m: m, eventSeq: eventSeq, deadSeq: deadSeq, eventID: m.Header.Get(bus.HeaderMsgID),
		corr: m.Header.Get(bus.HeaderCorrelationID), eventType: typ}
	if id != "" {
		it.eventID = id // the envelope's id: what receivers see in the body
	}
	return it
}
