package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/webhook"
	"github.com/agentbus/agentbus/pkg/webhook/send"
)

// footprint is what a dispatcher holds while its receivers are down.
type footprint struct {
	goroutines int
	heap       uint64 // heap in use after a collection
	stacks     uint64 // goroutine stacks in use
}

// downFootprint runs a dispatcher with n subscriptions whose receivers
// are down — half refuse every connection, half answer 503 — through a
// stream of events, and returns what the process holds once every
// subscription waits for a retry an hour away. It checks that nothing was
// taken out of the log: every event is still there, every cursor still
// before the first event, nothing dead-lettered.
func downFootprint(t *testing.T, n, events int) footprint {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/down"
	ln.Close()
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(busy.Close)
	list := make([]webhook.Subscription, n)
	for i := range list {
		url := refused
		if i%2 == 1 {
			url = busy.URL + "/busy"
		}
		list[i] = webhook.Subscription{Tenant: "default", ID: fmt.Sprintf("s%04d", i), URL: url, Active: true}
	}
	e.subs.set(list...)
	e.publish("default", "OrderPlaced", 1)
	// The defaults' scan and lease; a retry soon, then one an hour away:
	// the state of a receiver that is down for hours.
	e.dispatcher(webhook.Config{Scan: 2 * time.Second, Lease: 15 * time.Second,
		Backoff: send.Backoff{Schedule: []time.Duration{100 * time.Millisecond, time.Hour}}})
	for i := range events - 1 {
		e.publish("default", "OrderPlaced", 1)
		if i%100 == 99 {
			time.Sleep(50 * time.Millisecond) // a stream, not one burst
		}
	}
	ctx := context.Background()
	eventually(t, "every subscription waiting an hour for its third attempt", func() bool {
		for _, s := range list {
			raw, _, err := e.state.Get(ctx, "cursor.default."+s.ID)
			var c struct {
				Seq     uint64    `json:"seq"`
				Attempt int       `json:"attempt"`
				NextAt  time.Time `json:"nextAt"`
			}
			if err != nil || json.Unmarshal(raw, &c) != nil || c.Attempt != 2 || time.Until(c.NextAt) < 30*time.Minute {
				return false
			}
			if c.Seq != 0 {
				t.Fatalf("%s: cursor moved to %d with its receiver down", s.ID, c.Seq)
			}
		}
		return true
	})
	time.Sleep(4 * time.Second) // two scans: the nudges of the stream have settled
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fp := footprint{goroutines: runtime.NumGoroutine(), heap: ms.HeapInuse, stacks: ms.StackInuse}
	if last, err := e.events.LastSeq(ctx); err != nil || last != uint64(events) {
		t.Fatalf("the event log ends at %d (%v), want %d: events stay in the log", last, err, events)
	}
	if last, err := e.dead.LastSeq(ctx); err != nil || last != 0 {
		t.Fatalf("the dead-letter log ends at %d (%v): nothing is dead-lettered before the last retry", last, err)
	}
	t.Logf("%d subscriptions down, %d events: %d goroutines, heap %.1f MiB, stacks %.1f MiB in use",
		n, events, fp.goroutines, float64(fp.heap)/(1<<20), float64(fp.stacks)/(1<<20))
	return fp
}

// TestBoundedWhileReceiversAreDown: 1,000 subscriptions whose receivers
// are down, and a stream of events, cost about one goroutine and some
// KiB each, beside the same dispatcher with 10: nothing is held per event
// (each subscription holds back its cursor; the events stay in the log).
// Not parallel: it measures the whole process.
func TestBoundedWhileReceiversAreDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 1,000 subscriptions for about 15 s")
	}
	if raceDetector {
		// It measures the process's goroutines and heap, which the race
		// detector inflates, and takes minutes under it on a busy machine;
		// make test runs it again without the race detector.
		t.Skip("a footprint measurement: run without -race (make test runs it so, after the race run)")
	}
	const events = 4000
	var small, large footprint
	t.Run("10", func(t *testing.T) { small = downFootprint(t, 10, events) })
	t.Run("1000", func(t *testing.T) { large = downFootprint(t, 1000, events) })
	if t.Failed() {
		return
	}
	extra := 990
	if g := large.goroutines - small.goroutines; g < extra || g > extra+50 {
		t.Errorf("990 more subscriptions run %d more goroutines, want one each (990) and a few more at most", g)
	}
	// A worker, its lease, cursor and delivery record in NATS and its
	// share of the scans take some KiB of heap; an event held per
	// subscription, were it only a pointer in a queue, would add 32 KiB
	// each from the 4000 events.
	const perSub = 32 << 10
	grew := int64(large.heap) - int64(small.heap)
	if grew > int64(extra*perSub) {
		t.Errorf("990 more subscriptions hold %.1f MiB more heap, over %d KiB each", float64(grew)/(1<<20), perSub>>10)
	}
	t.Logf("990 more subscriptions: %d more goroutines, %.1f KiB more heap and %.1f KiB more stack each",
		large.goroutines-small.goroutines, float64(grew)/float64(extra)/1024, float64(int64(large.stacks)-int64(small.stacks))/float64(extra)/1024)
}
