package webhook

import (
	"context"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
)

// tail starts the live tail at the log's end, read again until it is
// known rather than taking in the whole log; false when ctx ended first.
func (d *Dispatcher) tail(ctx context.Context) bool {
	last, err := d.p.Events.LastSeq(ctx)
	for err != nil {
		d.log.Warn("webhooks: reading the event log's end; trying again", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
		last, err = d.p.Events.LastSeq(ctx)
	}
	d.recent = newRecent(last + 1)
	// Every event of the log, whatever its subject's shape, so that recent
	// holds all that a worker's filter could take.
	d.p.Live.Follow(ctx, d.cfg.Prefix+"."+bus.RootEvents+".>", last+1, d.followed)
	return true
}

// followed keeps the next event of the log in recent and nudges the
// workers of its tenant.
func (d *Dispatcher) followed(ev *bus.Event) {
	id, typ, _ := ev.Envelope()
	d.recent.add(newItem(ev.Message, ev.Seq, 0, id, typ))
	d.wake(ev)
}

// wake nudges the workers of the tenant an event belongs to.
func (d *Dispatcher) wake(ev *bus.Event) {
	if !ev.Parsed {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.byTenant[ev.Tenant] {
		w.nudge()
	}
}
