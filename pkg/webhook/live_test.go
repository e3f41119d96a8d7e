package webhook_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/follow"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// noFollow is the event log, counting its Follows.
type noFollow struct {
	bus.Log
	follows atomic.Int64
}

func (l *noFollow) Follow(ctx context.Context, filter string, from uint64, fn func(*bus.Message)) {
	l.follows.Add(1)
	l.Log.Follow(ctx, filter, from, fn)
}

// TestLiveTail: given the replica's follower of the log as its live
// tail, the dispatcher fills its window from it and does not follow the
// log itself; events reach the receiver in order.
func TestLiveTail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	f := follow.New(e.events, e.events, bus.Subjects{Prefix: "agentbus"}, testLog())
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	events := &noFollow{Log: e.events}
	e.subs.set(sub(e, "s", "/s"))
	d := webhook.New(webhook.Config{Scan: 50 * time.Millisecond, Lease: 500 * time.Millisecond, Backoff: fast(3)},
		webhook.Ports{Events: events, Live: f, DeadLetters: e.dead, State: e.state, Deliveries: e.recs,
			Subs: e.subs, Secrets: secrets{}, Outcomes: e.out, Client: &http.Client{}}, testLog())
	var wg sync.WaitGroup
	wg.Go(func() { d.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	ids := e.publish("default", "OrderPlaced", 5)
	eventually(t, "every event", func() bool { return len(e.rcv.delivered("/s")) >= 5 })
	if got := e.rcv.delivered("/s"); !slices.Equal(got, ids) {
		t.Errorf("got %v, want %v in order", got, ids)
	}
	if n := events.follows.Load(); n != 0 {
		t.Errorf("the dispatcher followed the log %d times itself", n)
	}
}
