package push_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
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

// seqs reads the sequences of the events f holds now, waiting until it
// holds want or more, and fails unless they are want.
func seqs(t *testing.T, f *push.Feed, want []uint64) {
	t.Helper()
	var got []uint64
	deadline := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case ev := <-f.C:
			got = append(got, ev.Seq)
		case <-deadline:
			t.Fatalf("the feed gave %v, want %v", got, want)
		}
	}
	if !slices.Equal(got, want) || len(f.C) > 0 {
		t.Fatalf("the feed gave %v (and %d more), want %v", got, len(f.C), want)
	}
}

// TestCommandsFeedWatchesCommands: a commands feed gets the events of the
// tenant's commands it watches, in order, and nothing of another tenant
// or command; after cancel, or once closed, it gets nothing more.
func TestCommandsFeedWatchesCommands(t *testing.T) {
	h, publish := hubOn(t)
	mine, other := h.Commands("a", 16), h.Commands("b", 16)
	defer other.Close()
	cancel := mine.Watch("c1")
	mine.Watch("c3")
	other.Watch("c1")
	want := []uint64{publish("a", "X", "c1")}
	seqs(t, other, []uint64{publish("b", "X", "c1")}) // same correlation id, another tenant
	publish("a", "X", "c2")
	publish("a", "X", "")
	want = append(want, publish("a", "Y", "c1"), publish("a", "Y", "c3"))
	seqs(t, mine, want)
	cancel()
	cancel() // idempotent
	publish("a", "Z", "c1")
	s3 := publish("a", "Z", "c3")
	seqs(t, other, []uint64{publish("b", "X", "c1")})
	seqs(t, mine, []uint64{s3})
	if w, f := h.Watching(); w != 2 || f != 0 {
		t.Fatalf("watching %d commands and %d feeds, want 2 and 0", w, f)
	}
	mine.Close()
	if w, _ := h.Watching(); w != 1 {
		t.Fatalf("watching %d commands after Close, want 1", w)
	}
	var none *push.Feed // a stream without a hub
	none.Watch("c1")()
	none.CatchUp()
	none.Close()
	if none.Events() != nil || none.Behind() {
		t.Fatal("a nil feed has events")
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
	mine := h.Commands("a", 16)
	defer mine.Close()
	mine.Watch("c1")
	f := h.Feed("a", nil, 16)
	defer f.Close()
	want := []uint64{publish("a", "X", "c1")}
	publish("b", "X", "c1")
	want = append(want, publish("a", "Y", "c1"))
	seqs(t, mine, want)
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
