package webhook

import (
	"context"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
)

// Follower is the dispatcher's input of live events: the one seam between
// delivery and the way a replica follows the event log. Workers read the
// events it hands over (kept in a bounded window) before they read the log
// themselves, and each event wakes the workers of its tenant.
type Follower interface {
	// Follow calls fn with every event appended to the event log from
	// sequence from on (every subject of the log's events, whatever its
	// shape), in log order, from one goroutine, and returns; it keeps
	// following, without skipping an event, until ctx ends.
	Follow(ctx context.Context, from uint64, fn func(*bus.Message))
}

// LogFollower is a Follower that reads the event log itself.
type LogFollower struct {
	Log    bus.Log
	Prefix string // subject prefix; "agentbus" when empty
}

var _ Follower = LogFollower{}

// Follow implements Follower.
func (f LogFollower) Follow(ctx context.Context, from uint64, fn func(*bus.Message)) {
	prefix := f.Prefix
	if prefix == "" {
		prefix = "agentbus"
	}
	f.Log.Follow(ctx, prefix+"."+bus.RootEvents+".>", from, fn)
}

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
	d.p.Live.Follow(ctx, last+1, d.followed)
	return true
}

// followed keeps the next event of the log in recent and nudges the
// workers of its tenant.
func (d *Dispatcher) followed(m *bus.Message) {
	d.recent.add(d.itemOf(m, m.Seq, 0))
	d.wake(m)
}

// wake nudges the workers of the tenant an event belongs to.
func (d *Dispatcher) wake(m *bus.Message) {
	tenant, _, _, _, ok := d.subj.ParseEvent(m.Subject)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.byTenant[tenant] {
		w.nudge()
	}
}
