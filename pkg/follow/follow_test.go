package follow_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/follow"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// countingLog counts the messages read through the Log port: by Follow
// (handed to its fn) and by Range.
type countingLog struct {
	bus.Log
	followed, ranged atomic.Int64
	mu               sync.Mutex
	byFilter         map[string]int // messages read by Range, by filter
}

func (c *countingLog) Range(ctx context.Context, filter string, from uint64, max int) ([]*bus.Message, error) {
	msgs, err := c.Log.Range(ctx, filter, from, max)
	c.ranged.Add(int64(len(msgs)))
	c.mu.Lock()
	c.byFilter[filter] += len(msgs)
	c.mu.Unlock()
	return msgs, err
}

func (c *countingLog) rangedBy(filter string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byFilter[filter]
}

func (c *countingLog) Follow(ctx context.Context, filter string, from uint64, fn func(*bus.Message)) {
	c.Log.Follow(ctx, filter, from, func(m *bus.Message) {
		c.followed.Add(1)
		fn(m)
	})
}

// logOn returns a fresh event stream's log, counting its reads, and a
// function that stores an event of tenant and type (as another process
// would, straight to NATS) and returns its sequence.
func logOn(t *testing.T) (*countingLog, func(tenant, typ string) uint64) {
	t.Helper()
	conn := natsjstest.Conn(t)
	ctx := t.Context()
	if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"agentbus.evt.>"}, AllowDirect: true,
		RePublish: &jetstream.RePublish{Source: "agentbus.evt.>", Destination: "agentbus.stored.evt.>", HeadersOnly: true}}); err != nil {
		t.Fatal(err)
	}
	log, err := conn.Log(ctx, "EV")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	return &countingLog{Log: log, byFilter: map[string]int{}}, func(tenant, typ string) uint64 {
		t.Helper()
		n++
		m := nats.NewMsg(fmt.Sprintf("agentbus.evt.%s.order.o-%d.%s", tenant, n, typ))
		m.Data = fmt.Appendf(nil, `{"id":"e-%d","type":%q}`, n, typ)
		ack, err := conn.JS.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
}

var subj = bus.Subjects{Prefix: "agentbus"}

// collector gathers the sequences a listener is handed.
type collector struct {
	mu   sync.Mutex
	seqs []uint64
	evs  []*bus.Event
}

func (c *collector) add(ev *bus.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seqs = append(c.seqs, ev.Seq)
	c.evs = append(c.evs, ev)
}

func (c *collector) wait(t *testing.T, want []uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c.mu.Lock()
		got := slices.Clone(c.seqs)
		c.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		if len(got) > len(want) || time.Now().After(deadline) {
			t.Fatalf("listener got %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFollowerReadsEachEventOnce: listeners of different filters that
// start at the follower's position are handed every matching event in
// stream order, sharing one bus.Event, and the log is read once: each
// event by the follower's one Follow, none by Range.
func TestFollowerReadsEachEventOnce(t *testing.T) {
	log, store := logOn(t)
	ctx := t.Context()
	f := follow.New(log, log, subj, slog.New(slog.DiscardHandler))
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var all, tenantA, placed collector
	f.Follow(ctx, ">", 1, all.add)
	f.Follow(ctx, subj.TenantEvents(bus.RootEvents, "a"), 1, tenantA.add)
	f.Follow(ctx, subj.Event(bus.RootEvents, "*", "*", "*", "OrderPlaced"), 1, placed.add)
	var wantAll, wantA, wantPlaced []uint64
	for i := range 30 {
		tenant, typ := []string{"a", "b"}[i%2], []string{"OrderPlaced", "OrderShipped", "OrderPaid"}[i%3]
		seq := store(tenant, typ)
		wantAll = append(wantAll, seq)
		if tenant == "a" {
			wantA = append(wantA, seq)
		}
		if typ == "OrderPlaced" {
			wantPlaced = append(wantPlaced, seq)
		}
	}
	all.wait(t, wantAll)
	tenantA.wait(t, wantA)
	placed.wait(t, wantPlaced)
	if got := log.followed.Load(); got != int64(len(wantAll)) {
		t.Errorf("the log's Follow read %d events, want each of the %d once", got, len(wantAll))
	}
	if got := log.ranged.Load(); got != 0 {
		t.Errorf("Range read %d events, want none: every listener was at the follower's position", got)
	}
	// One event, read once, is the same for every listener that takes it.
	if all.evs[0] != tenantA.evs[0] || all.evs[0] != placed.evs[0] {
		t.Error("the first event was handed out as different copies")
	}
	if ev := all.evs[0]; !ev.Parsed || ev.Tenant != "a" || ev.Type != "OrderPlaced" {
		t.Errorf("first event read as %+v", ev)
	}
}

// TestFollowerSlowListener: a listener that does not take its events
// falls behind once its queue is full — of events, or of bytes — without
// holding up another, and then catches up from the log, in order and
// without a gap or a repeat.
func TestFollowerSlowListener(t *testing.T) {
	for _, q := range []struct {
		name          string
		events, bytes int
	}{{"events", 4, follow.QueueBytes}, {"bytes", follow.QueueEvents, 100}} {
		t.Run(q.name, func(t *testing.T) { testSlowListener(t, q.events, q.bytes) })
	}
}

func testSlowListener(t *testing.T, events, bytes int) {
	log, store := logOn(t)
	ctx := t.Context()
	f := follow.New(log, log, subj, slog.New(slog.DiscardHandler))
	follow.SetQueue(f, events, bytes)
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var hold atomic.Bool
	var slow, fast collector
	slowFilter, fastFilter := "agentbus.evt.>", ">"
	f.Follow(ctx, slowFilter, 1, func(ev *bus.Event) {
		if hold.Load() {
			<-release
		}
		slow.add(ev)
	})
	f.Follow(ctx, fastFilter, 1, fast.add)
	// Both listeners in the fan-out first: one that began following after
	// an event was stored reads the log for it, then joins.
	want := []uint64{store("a", "Warm")}
	slow.wait(t, want)
	fast.wait(t, want)
	time.Sleep(200 * time.Millisecond) // for them to join, after their last read
	before := log.rangedBy(slowFilter)
	hold.Store(true)
	for range 40 {
		want = append(want, store("a", "OrderPlaced"))
	}
	fast.wait(t, want) // while the slow listener holds its first event
	if got := log.rangedBy(slowFilter) - before; got != 0 {
		t.Fatalf("the slow listener read %d events before it moved", got)
	}
	close(release)
	slow.wait(t, want)
	if log.rangedBy(slowFilter) == before {
		t.Error("the slow listener got events its queue could not hold without reading the log")
	}
	if got := log.followed.Load(); got != int64(len(want)) {
		t.Errorf("the log's Follow read %d events, want %d", got, len(want))
	}
	// Caught up, it is in the fan-out again: a new event comes without a
	// read of the log.
	time.Sleep(200 * time.Millisecond) // for it to join, after its last read
	ranged := log.rangedBy(slowFilter)
	want = append(want, store("a", "OrderPlaced"))
	slow.wait(t, want)
	fast.wait(t, want)
	if got := log.rangedBy(slowFilter); got != ranged {
		t.Errorf("after catching up, an event still cost %d reads", got-ranged)
	}
}

// TestFollowerLateListener: a listener that starts from a position before
// the follower's reads the log up to it, then joins; one that follows
// before Start is handed events once it has started.
func TestFollowerLateListener(t *testing.T) {
	log, store := logOn(t)
	ctx := t.Context()
	var stored []uint64
	for range 20 {
		stored = append(stored, store("a", "OrderPlaced"))
	}
	f := follow.New(log, log, subj, slog.New(slog.DiscardHandler))
	var early collector
	f.Follow(ctx, ">", stored[len(stored)-1]+1, early.add)
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var fromStart, fromMiddle, tenantB collector
	f.Follow(ctx, ">", 1, fromStart.add)
	f.Follow(ctx, ">", stored[9], fromMiddle.add)
	f.Follow(ctx, subj.TenantEvents(bus.RootEvents, "b"), 1, tenantB.add)
	fromStart.wait(t, stored)
	fromMiddle.wait(t, stored[9:])
	var later []uint64
	for i := range 10 {
		later = append(later, store([]string{"a", "b"}[i%2], "OrderPlaced"))
	}
	early.wait(t, later)
	fromStart.wait(t, append(slices.Clone(stored), later...))
	fromMiddle.wait(t, append(slices.Clone(stored[9:]), later...))
	var b []uint64
	for i, seq := range later {
		if i%2 == 1 {
			b = append(b, seq)
		}
	}
	tenantB.wait(t, b)
	if got := log.followed.Load(); got != int64(len(later)) {
		t.Errorf("the log's Follow read %d events, want the %d stored after Start", got, len(later))
	}
}

// TestFollowerListenerStops: a listener whose ctx ends is handed nothing
// more, and the others go on.
func TestFollowerListenerStops(t *testing.T) {
	log, store := logOn(t)
	ctx := t.Context()
	f := follow.New(log, log, subj, slog.New(slog.DiscardHandler))
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	var stopped, going collector
	f.Follow(lctx, ">", 1, stopped.add)
	f.Follow(ctx, ">", 1, going.add)
	first := store("a", "OrderPlaced")
	stopped.wait(t, []uint64{first})
	cancel()
	second := store("a", "OrderPlaced")
	going.wait(t, []uint64{first, second})
	time.Sleep(100 * time.Millisecond)
	stopped.wait(t, []uint64{first})
}

// TestFollowerReadsOnlyUpToItsQueue: a listener that joined the follower
// at a sequence reads the log only up to it, not the events its queue
// holds.
func TestFollowerReadsOnlyUpToItsQueue(t *testing.T) {
	log, store := logOn(t)
	var stored []uint64
	for range 20 {
		stored = append(stored, store("a", "OrderPlaced"))
	}
	f := follow.New(log, log, subj, slog.New(slog.DiscardHandler))
	var got collector
	next := follow.ReadUntil(t.Context(), f, ">", stored[0], stored[5], got.add)
	got.wait(t, stored[:5])
	if next != stored[5] {
		t.Errorf("stopped before %d, want %d", next, stored[5])
	}
	if n := log.ranged.Load(); n != 5 {
		t.Errorf("Range read %d events, want the 5 before the queue", n)
	}
}
