package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/webhook"
	"github.com/agentbus/agentbus/pkg/webhook/record"
	"github.com/agentbus/agentbus/pkg/webhook/send"
)

func sub(e *env, id, path string, types ...string) webhook.Subscription {
	return webhook.Subscription{Tenant: "default", ID: id, URL: e.rcv.srv.URL + path, Types: types, Active: true}
}

// TestDeliversInOrderThroughFailures: a receiver that fails each event's
// first two attempts (500, then a timeout) gets every event, signed, in
// stream order, each retry with the same webhook-id; another
// subscription, whose receiver answers at once, is not held back.
func TestDeliversInOrderThroughFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.rcv.setAnswer(func(path string, n int) (int, http.Header) {
		if path == "/flaky" && n == 1 {
			return http.StatusInternalServerError, nil
		}
		if path == "/flaky" && n == 2 {
			time.Sleep(300 * time.Millisecond) // past the attempt's timeout
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusOK, nil
	})
	e.subs.set(sub(e, "flaky", "/flaky"), sub(e, "fine", "/fine"))
	e.dispatcher(webhook.Config{Backoff: fast(3), Timeout: 150 * time.Millisecond})
	ids := e.publish("default", "OrderPlaced", 5)
	eventually(t, "every event at both", func() bool {
		return len(e.rcv.delivered("/flaky")) >= 5 && len(e.rcv.delivered("/fine")) >= 5
	})
	for _, path := range []string{"/flaky", "/fine"} {
		if got := e.rcv.delivered(path); !slices.Equal(got, ids) {
			t.Errorf("%s got %v, want %v in order", path, got, ids)
		}
	}
	for _, h := range e.rcv.got() {
		key, _ := send.Key("key-" + h.path[1:])
		ts, _ := strconv.ParseInt(h.ts, 10, 64)
		if want := send.Signature([][]byte{key}, h.id, time.Unix(ts, 0), h.body); h.sig != want {
			t.Fatalf("%s %s: signature %q, want %q", h.path, h.id, h.sig, want)
		}
		var env struct{ ID string }
		if json.Unmarshal(h.body, &env); env.ID != h.id {
			t.Fatalf("webhook-id %s for the envelope %s", h.id, h.body)
		}
	}
	// Records are written off the delivery path: stored before the cursor
	// moves past them, maybe after the receiver got the event.
	var recs []record.Delivery
	eventually(t, "every record", func() bool {
		var err error
		recs, err = e.recs.OfSubscription(context.Background(), "default", "flaky")
		return err == nil && len(recs) == 5 && recs[4].Status == record.Delivered
	})
	if r := recs[0]; r.Status != record.Delivered || len(r.Attempts) != 3 || r.Attempts[0].StatusCode != 500 ||
		r.Attempts[1].Error != "timed out" || r.Attempts[2].StatusCode != 200 {
		t.Errorf("the first event's record: %+v", r)
	}
}

// TestFilterAndTenant: a subscription gets its tenant's events of its
// types only.
func TestFilterAndTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.subs.set(sub(e, "typed", "/typed", "OrderShipped", "OrderPlaced"))
	e.dispatcher(webhook.Config{Backoff: fast(1)})
	placed := e.publish("default", "OrderPlaced", 1)
	e.publish("default", "NoteAdded", 2)
	e.publish("other", "OrderPlaced", 2)
	shipped := e.publish("default", "OrderShipped", 1)
	want := append(placed, shipped...)
	eventually(t, "both typed events", func() bool { return len(e.rcv.delivered("/typed")) >= 2 })
	time.Sleep(200 * time.Millisecond) // what else would come, comes by now
	if got := e.rcv.delivered("/typed"); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestDeadLetterThenRedeliver: an event that fails every attempt is
// dead-lettered, the subscription marked failing, and the next event is
// delivered; asked to, the dispatcher delivers the dead letter again.
func TestDeadLetterThenRedeliver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.publish("default", "OrderPlaced", 1)
	e.rcv.setAnswer(func(_ string, _ int) (int, http.Header) {
		return http.StatusServiceUnavailable, http.Header{"Retry-After": {"0"}}
	})
	e.subs.set(sub(e, "s", "/s"))
	e.dispatcher(webhook.Config{Backoff: fast(2)})
	eventually(t, "the dead letter", func() bool {
		last, err := e.dead.LastSeq(context.Background())
		return err == nil && last == 1
	})
	// Marked failing right after the dead letter is stored.
	eventually(t, "the subscription marked failing", func() bool { _, failing := e.out.counts(); return failing >= 1 })
	if _, failing := e.out.counts(); failing != 1 {
		t.Fatalf("failing marked %d times", failing)
	}
	if n := len(e.rcv.got()); n != 3 {
		t.Fatalf("%d attempts, want 3 (one and two retries)", n)
	}
	var dead []record.Delivery
	eventually(t, "the dead-lettered event's record", func() bool {
		dead, _ = e.recs.OfSubscription(context.Background(), "default", "s")
		return len(dead) == 1 && dead[0].Status != record.Retrying
	})
	if dead[0].Status != record.Failed || len(dead[0].Attempts) != 3 {
		t.Fatalf("the dead-lettered event's record: %+v", dead[0])
	}
	dl, err := e.dead.Get(context.Background(), 1)
	if err != nil || dl.Header.Get(webhook.HeaderSubscription) != "s" || dl.Header.Get(webhook.HeaderEventSeq) != "1" {
		t.Fatalf("dead letter %+v %v", dl, err)
	}
	e.rcv.setAnswer(nil)
	next := e.publish("default", "OrderPlaced", 1)
	eventually(t, "the next event", func() bool { return len(e.rcv.delivered("/s")) == 1 })
	if err := webhook.Redeliver(context.Background(), e.state, e.dead, "agentbus", "default", "s"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the dead letter again", func() bool { return len(e.rcv.delivered("/s")) == 2 })
	if got := e.rcv.delivered("/s"); got[0] != next[0] || got[1] != ids[0] {
		t.Fatalf("delivered %v", got)
	}
	var recs []record.Delivery
	eventually(t, "the records after the redelivery", func() bool {
		recs, _ = e.recs.OfSubscription(context.Background(), "default", "s")
		return len(recs) == 2 && recs[0].Status == record.Delivered
	})
	if len(recs[0].Attempts) != 4 {
		t.Fatalf("the redelivered event's record: %+v", recs[0])
	}
}

// TestGoneDisables: 410 Gone disables the subscription and stops its
// deliveries; a redirect is a failed attempt, never followed.
func TestGoneDisables(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.rcv.setAnswer(func(path string, _ int) (int, http.Header) {
		switch path {
		case "/gone":
			return http.StatusGone, nil
		case "/moved":
			return http.StatusFound, http.Header{"Location": {"/target"}}
		}
		return http.StatusOK, nil
	})
	e.subs.set(sub(e, "gone", "/gone"), sub(e, "moved", "/moved"))
	e.dispatcher(webhook.Config{Backoff: fast(1)})
	e.publish("default", "OrderPlaced", 3)
	eventually(t, "disabled and dead-lettered", func() bool {
		disabled, failing := e.out.counts()
		return disabled == 1 && failing == 3
	})
	time.Sleep(200 * time.Millisecond)
	var gone, target int
	for _, h := range e.rcv.got() {
		switch h.path {
		case "/gone":
			gone++
		case "/target":
			target++
		}
	}
	if gone != 1 || target != 0 {
		t.Fatalf("attempts after 410: %d (want 1); redirects followed: %d (want 0)", gone, target)
	}
	recs, _ := e.recs.OfSubscription(context.Background(), "default", "moved")
	if len(recs) == 0 || recs[0].Attempts[0].Error != "redirect to /target not followed" {
		t.Fatalf("the redirect's record: %+v", recs)
	}
}

// TestOneDeliveryAcrossReplicas: two dispatchers on one state bucket
// deliver each event to each subscription once.
func TestOneDeliveryAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var list []webhook.Subscription
	for _, id := range []string{"a", "b", "c", "d"} {
		list = append(list, sub(e, id, "/"+id))
	}
	e.subs.set(list...)
	e.dispatcher(webhook.Config{Backoff: fast(3), Holder: "one"})
	e.dispatcher(webhook.Config{Backoff: fast(3), Holder: "two"})
	ids := e.publish("default", "OrderPlaced", 20)
	eventually(t, "every event everywhere", func() bool {
		for _, s := range list {
			if len(e.rcv.delivered("/"+s.ID)) < len(ids) {
				return false
			}
		}
		return true
	})
	time.Sleep(200 * time.Millisecond)
	for _, s := range list {
		if got := e.rcv.delivered("/" + s.ID); !slices.Equal(got, ids) {
			t.Errorf("%s got %d deliveries, want each of %d once, in order", s.ID, len(got), len(ids))
		}
	}
}

// TestLeaseOfADeadReplica: a lease left by a replica that died (never
// released) is taken over once it expires, and delivery goes on from the
// cursor.
func TestLeaseOfADeadReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.publish("default", "OrderPlaced", 2)
	until := time.Now().Add(600 * time.Millisecond)
	raw, _ := json.Marshal(map[string]any{"holder": "dead", "until": until})
	if _, err := e.state.Create(context.Background(), "lease.default.s", raw); err != nil {
		t.Fatal(err)
	}
	if _, err := e.state.Create(context.Background(), "cursor.default.s", []byte(`{"seq":1}`)); err != nil {
		t.Fatal(err)
	}
	e.subs.set(sub(e, "s", "/s"))
	e.dispatcher(webhook.Config{Backoff: fast(1)})
	eventually(t, "the delivery after the lease expired", func() bool { return len(e.rcv.delivered("/s")) == 1 })
	if time.Now().Before(until) {
		t.Fatal("delivered while another replica's lease held")
	}
	if got := e.rcv.delivered("/s"); got[0] != ids[1] {
		t.Fatalf("delivered %v, want only %s (the cursor was past %s)", got, ids[1], ids[0])
	}
}

// TestRestartDoesNotSkip: a dispatcher stopped mid-retry and started
// again goes on with the same event (at most a repeat, same webhook-id).
func TestRestartDoesNotSkip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.rcv.setAnswer(func(_ string, n int) (int, http.Header) {
		if n < 3 {
			return http.StatusBadGateway, nil
		}
		return http.StatusOK, nil
	})
	e.subs.set(sub(e, "s", "/s"))
	stop := e.dispatcher(webhook.Config{Backoff: send.Backoff{Schedule: []time.Duration{time.Hour}}})
	ids := e.publish("default", "OrderPlaced", 2)
	eventually(t, "the first attempt", func() bool { return len(e.rcv.got()) == 1 })
	stop()
	// Another replica finds the cursor waiting an hour: a replay by the
	// operator (cursor reset) gets it going at once.
	if err := webhook.Replay(context.Background(), e.state, "default", "s", 0); err != nil {
		t.Fatal(err)
	}
	e.dispatcher(webhook.Config{Backoff: fast(5)})
	eventually(t, "both events", func() bool { return len(e.rcv.delivered("/s")) == 2 })
	if got := e.rcv.delivered("/s"); !slices.Equal(got, ids) {
		t.Fatalf("delivered %v, want %v", got, ids)
	}
}

// TestEnabledAgainAfterGone: a subscription held after a 410 goes on from
// the refused event once the registry shows it active with a status
// changed after the 410 (however it was enabled); a deleted
// subscription's cursor and lease go.
func TestEnabledAgainAfterGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.rcv.setAnswer(func(string, int) (int, http.Header) { return http.StatusGone, nil })
	s := sub(e, "s", "/s")
	e.subs.set(s)
	e.dispatcher(webhook.Config{Backoff: fast(1)})
	ids := e.publish("default", "OrderPlaced", 2)
	eventually(t, "the 410", func() bool { d, _ := e.out.counts(); return d == 1 })
	e.rcv.setAnswer(nil)
	time.Sleep(200 * time.Millisecond)
	if n := len(e.rcv.delivered("/s")); n != 0 {
		t.Fatalf("%d deliveries while held", n)
	}
	off := s
	off.Active, off.Since = false, time.Now()
	e.subs.set(off)
	time.Sleep(200 * time.Millisecond) // a scan sees it disabled
	if n := len(e.rcv.delivered("/s")); n != 0 {
		t.Fatalf("%d deliveries while disabled", n)
	}
	on := s
	on.Since = time.Now()
	e.subs.set(on)
	eventually(t, "both events after the enable", func() bool { return len(e.rcv.delivered("/s")) == 2 })
	if got := e.rcv.delivered("/s"); !slices.Equal(got, ids) {
		t.Fatalf("delivered %v, want %v", got, ids)
	}
	e.subs.set()
	eventually(t, "the cursor and lease deleted", func() bool {
		_, _, errC := e.state.Get(context.Background(), "cursor.default.s")
		_, _, errL := e.state.Get(context.Background(), "lease.default.s")
		return errC != nil && errL != nil
	})
}

// TestOperatorChangesReachAWaitingWorker: a subscription waiting an hour
// for its next retry is not held back by the wait when an operator replays
// it or redelivers its dead letters; without either, neither the wait nor
// a new event brings the retry forward.
func TestOperatorChangesReachAWaitingWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.publish("default", "OrderPlaced", 1)
	// Both subscriptions failed their first attempt at the event and wait
	// an hour for the retry; "r" also has a dead letter, of that event.
	waiting, _ := json.Marshal(map[string]any{"seq": 0, "attempt": 1, "nextAt": time.Now().Add(time.Hour)})
	ctx := context.Background()
	for _, id := range []string{"p", "r"} {
		if _, err := e.state.Create(ctx, "cursor.default."+id, waiting); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := e.events.Get(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	dl := &bus.Message{Subject: "agentbus.dlq.default.r", Data: ev.Data,
		Header: bus.Header{webhook.HeaderSubscription: {"r"}, webhook.HeaderEventSeq: {"1"}}}
	if _, err := e.dead.Append(ctx, []*bus.Message{dl}, nil); err != nil {
		t.Fatal(err)
	}
	e.subs.set(sub(e, "p", "/p"), sub(e, "r", "/r"))
	e.dispatcher(webhook.Config{Backoff: send.Backoff{Schedule: []time.Duration{time.Hour}}})
	eventually(t, "both leases taken", func() bool {
		_, _, perr := e.state.Get(ctx, "lease.default.p")
		_, _, rerr := e.state.Get(ctx, "lease.default.r")
		return perr == nil && rerr == nil
	})
	more := e.publish("default", "OrderPlaced", 1) // a nudge: not a reason to retry early
	time.Sleep(300 * time.Millisecond)             // six scans: both workers wait
	if hits := e.rcv.got(); len(hits) != 0 {
		t.Fatalf("%d attempts before the retry was due", len(hits))
	}
	if err := webhook.Replay(ctx, e.state, "default", "p", 0); err != nil {
		t.Fatal(err)
	}
	if err := webhook.Redeliver(ctx, e.state, e.dead, "agentbus", "default", "r"); err != nil {
		t.Fatal(err)
	}
	want := append(ids, more...)
	eventually(t, "the replay and the redelivery", func() bool {
		return len(e.rcv.delivered("/p")) >= 2 && len(e.rcv.delivered("/r")) >= 1
	})
	if got := e.rcv.delivered("/p"); !slices.Equal(got, want) {
		t.Fatalf("replayed %v, want %v", got, want)
	}
	if got := e.rcv.delivered("/r"); got[0] != ids[0] {
		t.Fatalf("redelivered %v, want the dead letter %s", got, ids[0])
	}
}

// TestRecordKeepsAKiBOfTheAnswer: an attempt's record keeps the first KiB
// of the answer's body at most, cut on a rune boundary.
func TestRecordKeepsAKiBOfTheAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	answer := strings.Repeat("€", 500) // 1,500 bytes; byte 1,024 is inside a rune
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(answer))
	}))
	t.Cleanup(srv.Close)
	e.subs.set(webhook.Subscription{Tenant: "default", ID: "talky", URL: srv.URL, Active: true})
	e.dispatcher(webhook.Config{Backoff: fast(1)})
	e.publish("default", "OrderPlaced", 1)
	var recs []record.Delivery
	eventually(t, "the record", func() bool {
		var err error
		recs, err = e.recs.OfSubscription(context.Background(), "default", "talky")
		return err == nil && len(recs) == 1 && recs[0].Status == record.Delivered
	})
	if got := recs[0].Attempts[0].Response; got != answer[:1023] {
		t.Errorf("the record keeps %d bytes of the answer (valid UTF-8: %v), want its first 1,023", len(got), utf8.ValidString(got))
	}
}

// TestRecordKeepsNothingWhenNothingIsRead: with MaxResponseBytes below 0
// (webhooks.maxResponseBytes 0) no byte of the answer is read or kept.
func TestRecordKeepsNothingWhenNothingIsRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("an answer"))
	}))
	t.Cleanup(srv.Close)
	e.subs.set(webhook.Subscription{Tenant: "default", ID: "mute", URL: srv.URL, Active: true})
	e.dispatcher(webhook.Config{Backoff: fast(1), MaxResponseBytes: -1})
	e.publish("default", "OrderPlaced", 1)
	var recs []record.Delivery
	eventually(t, "the record", func() bool {
		var err error
		recs, err = e.recs.OfSubscription(context.Background(), "default", "mute")
		return err == nil && len(recs) == 1 && recs[0].Status == record.Delivered
	})
	if got := recs[0].Attempts[0].Response; got != "" {
		t.Errorf("the record keeps %q of the answer, want nothing", got)
	}
}

// TestWaitingCountsLargeDeadLetters: the dead letters waiting are counted
// past what one read of the log holds (bus.RangeBytes of payload).
func TestWaitingCountsLargeDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n, size = 12, 512 << 10 // 6 MiB in all
	payload := []byte(`{"pad":"` + strings.Repeat("x", size) + `"}`)
	for range n {
		m := &bus.Message{Subject: "agentbus.dlq.default.big", Data: payload, Header: bus.Header{webhook.HeaderSubscription: {"big"}}}
		if _, err := e.dead.Append(context.Background(), []*bus.Message{m}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c := &webhook.Control{State: e.state, DeadLetters: e.dead, Deliveries: e.recs}
	if got, err := c.Waiting(context.Background(), "default", "big"); err != nil || got != n {
		t.Fatalf("Waiting: %d, %v; want %d", got, err, n)
	}
}

// TestSkipPassesOver: an event whose subject the subscription skips is
// passed over with no attempt and no record, and delivery goes on with
// the next; another subscription is sent it.
func TestSkipPassesOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	own := sub(e, "own", "/own")
	own.Skip = []string{"agentbus.evt.default._._.OwnState"}
	e.subs.set(own, sub(e, "other", "/other"))
	e.dispatcher(webhook.Config{Backoff: fast(1)})
	skipped := e.publish("default", "OwnState", 2)
	ids := e.publish("default", "OrderPlaced", 1)
	eventually(t, "the next event at both", func() bool {
		return len(e.rcv.delivered("/own")) >= 1 && len(e.rcv.delivered("/other")) >= 3
	})
	if got := e.rcv.delivered("/own"); !slices.Equal(got, ids) {
		t.Errorf("the skipping subscription got %v, want %v", got, ids)
	}
	if got := e.rcv.delivered("/other"); !slices.Equal(got, append(skipped, ids...)) {
		t.Errorf("the other subscription got %v, want %v", got, append(skipped, ids...))
	}
	var recs []record.Delivery
	eventually(t, "the record", func() bool {
		var err error
		recs, err = e.recs.OfSubscription(context.Background(), "default", "own")
		return err == nil && len(recs) >= 1
	})
	if len(recs) != 1 || recs[0].EventID != ids[0] {
		t.Errorf("records of the skipping subscription: %+v; want the one of %s", recs, ids[0])
	}
}

// TestInjectedClockAndJitter: every time delivery reads comes from
// Config.Now — the signature's timestamp, the records' times, and the
// leases, cursors and retries, which keep working on a clock years ahead
// of the machine's — and the retry's jitter from Config.Random.
func TestInjectedClockAndJitter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ahead := time.Date(2040, 1, 2, 3, 4, 5, 0, time.UTC)
	start := time.Now()
	draws := 0
	var mu sync.Mutex
	e.rcv.setAnswer(func(_ string, n int) (int, http.Header) {
		if n == 1 {
			return http.StatusInternalServerError, nil
		}
		return http.StatusNoContent, nil
	})
	e.subs.set(sub(e, "clock", "/clock"))
	b := fast(2)
	b.Jitter = 0.5
	e.dispatcher(webhook.Config{Backoff: b, Now: func() time.Time { return ahead.Add(time.Since(start)) },
		Random: func() float64 { mu.Lock(); defer mu.Unlock(); draws++; return 0 }})
	ids := e.publish("default", "OrderPlaced", 3)
	eventually(t, "every event, through a retry each", func() bool { return len(e.rcv.delivered("/clock")) >= 3 })
	if got := e.rcv.delivered("/clock"); !slices.Equal(got, ids) {
		t.Fatalf("delivered %v, want %v", got, ids)
	}
	for _, h := range e.rcv.got() {
		ts, _ := strconv.ParseInt(h.ts, 10, 64)
		if at := time.Unix(ts, 0); at.Before(ahead) || at.After(ahead.Add(time.Hour)) {
			t.Errorf("webhook-timestamp %s; want the injected clock's (%s on)", at, ahead)
		}
	}
	var recs []record.Delivery
	eventually(t, "the records", func() bool {
		var err error
		recs, err = e.recs.OfSubscription(context.Background(), "default", "clock")
		return err == nil && len(recs) == 3 && recs[2].Status == record.Delivered
	})
	for _, r := range recs {
		for _, a := range r.Attempts {
			if a.At.Before(ahead) {
				t.Errorf("attempt at %s; want the injected clock's", a.At)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if draws < 3 {
		t.Errorf("the jitter source was drawn %d times; want once per attempt at least", draws)
	}
}

// countingFollower hands over what the log's own tail does, counting it.
type countingFollower struct {
	bus.Tail
	n     atomic.Int64
	first atomic.Uint64 // the sequence of the first event handed over
}

func (f *countingFollower) Follow(ctx context.Context, filter string, from uint64, fn func(*bus.Event)) {
	f.Tail.Follow(ctx, filter, from, func(ev *bus.Event) {
		f.first.CompareAndSwap(0, ev.Seq)
		f.n.Add(1)
		fn(ev)
	})
}

// TestLiveEventsThroughTheFollower: the dispatcher takes its live events
// from the Follower it is given, from the log's end on (not the events
// stored before it started), and delivers them.
func TestLiveEventsThroughTheFollower(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish("default", "Before", 2) // before the dispatcher: not followed
	live := &countingFollower{Tail: bus.LogTail(e.events, bus.Subjects{Prefix: "agentbus"})}
	e.live = live
	e.subs.set(sub(e, "live", "/live", "OrderPlaced"))
	e.dispatcher(webhook.Config{Backoff: fast(1)})
	eventually(t, "the tail started", func() bool {
		e.publish("default", "Ping", 1)
		return live.n.Load() > 0
	})
	time.Sleep(50 * time.Millisecond) // the last pings followed
	base := live.n.Load()
	ids := e.publish("default", "OrderPlaced", 3)
	eventually(t, "the events", func() bool { return len(e.rcv.delivered("/live")) >= 3 })
	if got := e.rcv.delivered("/live"); !slices.Equal(got, ids) {
		t.Errorf("delivered %v, want %v", got, ids)
	}
	eventually(t, "the events followed", func() bool { return live.n.Load() >= base+3 })
	if first := live.first.Load(); first <= 2 {
		t.Errorf("the follower started at event %d, before the log's end (2) when the dispatcher started", first)
	}
}

// TestTraceContextCarried: each attempt of an event that carries a trace
// context sends it as traceparent (tracing off: the caller's, unchanged),
// and its dead letter keeps it for a redelivery.
func TestTraceContextCarried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	body := []byte(`{"specversion":"1.0","id":"ev-traced","source":"test","type":"OrderPlaced","datacontenttype":"application/json","time":"2026-01-01T00:00:00Z","data":{}}`)
	m := &bus.Message{Subject: "agentbus.evt.default._._.OrderPlaced", Data: body,
		Header: bus.Header{bus.HeaderMsgID: {"ev-traced"}, bus.HeaderCorrelationID: {"corr-traced"}, "traceparent": {tp}}}
	if _, err := e.events.Append(context.Background(), []*bus.Message{m}, nil); err != nil {
		t.Fatal(err)
	}
	e.rcv.setAnswer(func(string, int) (int, http.Header) {
		return http.StatusServiceUnavailable, http.Header{"Retry-After": {"0"}}
	})
	e.subs.set(sub(e, "s", "/s"))
	e.dispatcher(webhook.Config{Backoff: fast(1)})
	eventually(t, "the dead letter", func() bool {
		last, err := e.dead.LastSeq(context.Background())
		return err == nil && last == 1
	})
	for _, h := range e.rcv.got() {
		if h.traceparent != tp {
			t.Errorf("an attempt sent traceparent %q, want %q", h.traceparent, tp)
		}
	}
	dl, err := e.dead.Get(context.Background(), 1)
	if err != nil || dl.Header.Get("traceparent") != tp {
		t.Fatalf("the dead letter's traceparent: %v %v", dl, err)
	}
}
