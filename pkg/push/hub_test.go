package push_test

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
	"github.com/agentbus/agentbus/pkg/push"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// hubOn starts a hub on a fresh event stream and returns it with a
// function that publishes an event of tenant, type and correlation id
// (as another process would, straight to NATS).
func hubOn(t *testing.T) (*push.Hub, func(tenant, typ, corr string) uint64) {
	t.Helper()
	h, _, publish := hubOnTail(t, false)
	return h, publish
}

// followCounter counts the Follows of the log.
type followCounter struct {
	bus.Log
	follows atomic.Int64
}

func (c *followCounter) Follow(ctx context.Context, filter string, from uint64, fn func(*bus.Message)) {
	c.follows.Add(1)
	c.Log.Follow(ctx, filter, from, fn)
}

// hubOnTail is hubOn, the hub started on the replica's follower of the
// log when follower is true; it also returns the log, counting Follows.
func hubOnTail(t *testing.T, follower bool) (*push.Hub, *followCounter, func(tenant, typ, corr string) uint64) {
	t.Helper()
	conn := natsjstest.Conn(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"agentbus.evt.>"}, AllowDirect: true,
		RePublish: &jetstream.RePublish{Source: "agentbus.evt.>", Destination: "agentbus.stored.evt.>", HeadersOnly: true}}); err != nil {
		t.Fatal(err)
	}
	nlog, err := conn.Log(ctx, "EV")
	if err != nil {
		t.Fatal(err)
	}
	log := &followCounter{Log: nlog}
	quiet := slog.New(slog.DiscardHandler)
	h := push.New(log, "agentbus", quiet)
	if follower {
		f := follow.New(log, log, bus.Subjects{Prefix: "agentbus"}, quiet)
		if err := f.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := h.StartOn(ctx, f); err != nil {
			t.Fatal(err)
		}
	} else if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	return h, log, func(tenant, typ, corr string) uint64 {
		t.Helper()
		n++
		m := nats.NewMsg(fmt.Sprintf("agentbus.evt.%s._._.%s", tenant, typ))
		m.Data = fmt.Appendf(nil, `{"n":%d}`, n)
		if corr != "" {
			m.Header.Set(bus.HeaderCorrelationID, corr)
		}
		ack, err := conn.JS.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
}

// collector gathers the sequences a watch hands out.
type collector struct {
	mu   sync.Mutex
	seqs []uint64
}

func (c *collector) add(m *bus.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seqs = append(c.seqs, m.Seq)
}

func (c *collector) wait(t *testing.T, want []uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		got := slices.Clone(c.seqs)
		c.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		if len(got) > len(want) || time.Now().After(deadline) {
			t.Fatalf("watch got %v, want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatchHandsOutOneCommandsEvents: a watch gets the events of its
// tenant's command, in order, and nothing of another tenant or command;
// after cancel it gets nothing more.
func TestWatchHandsOutOneCommandsEvents(t *testing.T) {
	h, publish := hubOn(t)
	var mine, other collector
	cancel := h.Watch("a", "c1", mine.add)
	defer h.Watch("b", "c1", other.add)()
	want := []uint64{publish("a", "X", "c1")}
	publish("b", "X", "c1") // same correlation id, another tenant
	other.wait(t, []uint64{2})
	publish("a", "X", "c2")
	publish("a", "X", "")
	want = append(want, publish("a", "Y", "c1"))
	mine.wait(t, want)
	cancel()
	cancel() // idempotent
	publish("a", "Z", "c1")
	last := publish("b", "X", "c1")
	other.wait(t, []uint64{2, last})
	mine.wait(t, want)
	if w, f := h.Watching(); w != 1 || f != 0 {
		t.Fatalf("watching %d watches and %d feeds, want 1 and 0", w, f)
	}
}

// TestFeedFallsBehindAndCatchesUp: a feed whose reader does not keep up
// drops events and says so, at once; CatchUp clears it and the feed goes
// on with what comes next.
func TestFeedFallsBehindAndCatchesUp(t *testing.T) {
	h, publish := hubOn(t)
	f := h.Feed("a", func(ev *push.Event) bool { return ev.Type == "Keep" }, 2)
	defer f.Close()
	publish("a", "Drop", "")
	s1 := publish("a", "Keep", "")
	s2 := publish("a", "Keep", "")
	publish("a", "Keep", "") // past the queue
	select {
	case <-f.Lagged:
	case <-time.After(10 * time.Second):
		t.Fatal("a full feed did not say it fell behind")
	}
	if !f.Behind() {
		t.Fatal("Behind is false after Lagged")
	}
	if a, b := <-f.C, <-f.C; a.Seq != s1 || b.Seq != s2 {
		t.Fatalf("the queue holds %d and %d, want %d and %d", a.Seq, b.Seq, s1, s2)
	}
	f.CatchUp()
	if f.Behind() {
		t.Fatal("Behind after CatchUp")
	}
	s4 := publish("a", "Keep", "")
	publish("b", "Keep", "")
	select {
	case ev := <-f.C:
		if ev.Seq != s4 || ev.Type != "Keep" {
			t.Fatalf("after CatchUp the feed gave %d %s, want %d", ev.Seq, ev.Type, s4)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing after CatchUp")
	}
}

// TestHubOnTheFollower: started on the replica's follower, the hub does
// not follow the log itself, and hands out what the follower read: a
// watch its command's events, a feed its tenant's, servable or not.
func TestHubOnTheFollower(t *testing.T) {
	h, log, publish := hubOnTail(t, true)
	var mine collector
	defer h.Watch("a", "c1", mine.add)()
	f := h.Feed("a", nil, 16)
	defer f.Close()
	want := []uint64{publish("a", "X", "c1")}
	publish("b", "X", "c1")
	want = append(want, publish("a", "Y", "c1"))
	mine.wait(t, want)
	for _, seq := range want {
		select {
		case ev := <-f.C:
			if ev.Seq != seq || !ev.Servable || ev.CorrelationID != "c1" {
				t.Fatalf("the feed gave %d (servable %v, correlation %q), want %d, servable, c1", ev.Seq, ev.Servable, ev.CorrelationID, seq)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the feed gave nothing for %d", seq)
		}
	}
	if n := log.follows.Load(); n != 1 {
		t.Errorf("the log was followed %d times, want once (by the follower)", n)
	}
}
