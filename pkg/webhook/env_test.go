package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
	"github.com/agentbus/agentbus/pkg/webhook"
	"github.com/agentbus/agentbus/pkg/webhook/record"
	"github.com/agentbus/agentbus/pkg/webhook/send"
	"github.com/nats-io/nats.go/jetstream"
)

// env is an event log, a dead-letter log and the webhook buckets on a real
// embedded nats-server, and a loopback receiver.
type env struct {
	t      testing.TB
	conn   *natsjs.Conn
	events *natsjs.Log
	dead   *natsjs.Log
	state  *natsjs.KV
	recs   *record.Deliveries
	subs   *subs
	out    *outcomes
	rcv    *receiver
	client *http.Client // the dispatcher's; nil: a default one
	live   bus.Tail     // the dispatcher's; nil: its default
}

func testLog() *slog.Logger {
	if os.Getenv("AGENTBUS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newEnv(t testing.TB) *env {
	t.Helper()
	conn := natsjstest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, subj := range map[string]string{"EV": "agentbus.evt.>", "DLQ": "agentbus.dlq.>"} {
		if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}, AllowDirect: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"WH", "WHD"} {
		if _, err := conn.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b}); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, conn: conn, subs: &subs{}, out: &outcomes{}, rcv: newReceiver(t)}
	var err error
	if e.events, err = conn.Log(ctx, "EV"); err != nil {
		t.Fatal(err)
	}
	if e.dead, err = conn.Log(ctx, "DLQ"); err != nil {
		t.Fatal(err)
	}
	if e.state, err = conn.KV(ctx, "WH"); err != nil {
		t.Fatal(err)
	}
	kv, err := conn.KV(ctx, "WHD")
	if err != nil {
		t.Fatal(err)
	}
	e.recs = record.NewDeliveries(kv, testLog())
	return e
}

// fast is a schedule for tests: retries after 20 ms.
func fast(retries int) send.Backoff {
	s := make([]time.Duration, retries)
	for i := range s {
		s[i] = 20 * time.Millisecond
	}
	return send.Backoff{Schedule: s}
}

// dispatcher starts a Dispatcher until the test ends (or stop is called).
func (e *env) dispatcher(cfg webhook.Config) (stop func()) {
	if cfg.Scan == 0 {
		cfg.Scan = 50 * time.Millisecond
	}
	if cfg.Lease == 0 {
		cfg.Lease = 500 * time.Millisecond
	}
	client := e.client
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	d := webhook.New(cfg, webhook.Ports{Events: e.events, DeadLetters: e.dead, State: e.state, Deliveries: e.recs,
		Subs: e.subs, Secrets: secrets{}, Outcomes: e.out, Client: client, Live: e.live}, testLog())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(stop)
	return stop
}

// publish appends n events of type typ for tenant and returns their ids.
// eventIDs numbers the events publish makes, so that no two share an id
// (the log refuses a repeated one within its duplicate window).
var eventIDs atomic.Uint64

func (e *env) publish(tenant, typ string, n int) []string {
	e.t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("ev-%s-%d-%d", typ, eventIDs.Add(1), i)
		body, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": id, "source": "test", "type": typ,
			"datacontenttype": "application/json", "time": time.Now().UTC().Format(time.RFC3339Nano), "data": map[string]any{"n": i}})
		m := &bus.Message{Subject: "agentbus.evt." + tenant + "._._." + typ, Data: body,
			Header: bus.Header{bus.HeaderMsgID: {id}, bus.HeaderCorrelationID: {"corr-" + id}}}
		// A duplicate is this append tried again after a first try that
		// stored it but answered too late (a loaded machine): it is stored.
		// The store unavailable past its own retries (a machine loaded
		// still more) is asked again, as a producer would.
		for try := 1; ; try++ {
			_, err := e.events.Append(context.Background(), []*bus.Message{m}, nil)
			if err == nil || errors.Is(err, errs.ErrDuplicate) {
				break
			}
			if !errors.Is(err, errs.ErrUnavailable) || try == 5 {
				e.t.Fatal(err)
			}
		}
		ids = append(ids, id)
	}
	return ids
}

// subs is a fixed list of subscriptions the test changes.
type subs struct {
	mu   sync.Mutex
	list []webhook.Subscription
}

func (s *subs) All() []webhook.Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]webhook.Subscription(nil), s.list...)
}

func (s *subs) Start(context.Context, string, string) (uint64, error) { return 0, nil }

func (s *subs) set(list ...webhook.Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = list
}

// secrets signs every subscription with its id as the key.
type secrets struct{}

func (secrets) Signing(_ context.Context, _, id string) ([][]byte, error) {
	return [][]byte{[]byte("key-" + id)}, nil
}

// outcomes records what the dispatcher decided.
type outcomes struct {
	mu       sync.Mutex
	disabled []string
	failing  []string
}

func (o *outcomes) Disable(_ context.Context, tenant, id string, _ uint64, reason string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.disabled = append(o.disabled, tenant+"/"+id+": "+reason)
	return nil
}

func (o *outcomes) Failing(_ context.Context, tenant, id string, seq uint64, reason string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failing = append(o.failing, fmt.Sprintf("%s/%s@%d: %s", tenant, id, seq, reason))
	return nil
}

func (o *outcomes) Recovered(context.Context, string, string, uint64) error { return nil }

func (o *outcomes) counts() (int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.disabled), len(o.failing)
}

// hit is one request the receiver got.
type hit struct {
	path, id, ts, sig string
	traceparent       string
	body              []byte
	status            int
}

// receiver is a loopback webhook receiver; answer decides each response
// (default 204).
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	hits   []hit
	answer func(path string, n int) (int, http.Header) // n: how often this id came, from 1
}

func newReceiver(t testing.TB) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		h := hit{path: req.URL.Path, id: req.Header.Get("webhook-id"), ts: req.Header.Get("webhook-timestamp"),
			sig: req.Header.Get("webhook-signature"), traceparent: req.Header.Get("traceparent"), body: body}
		r.mu.Lock()
		n := 1
		for _, p := range r.hits {
			if p.id == h.id && p.path == h.path {
				n++
			}
		}
		answer := r.answer
		r.hits = append(r.hits, h) // answered below
		i := len(r.hits) - 1
		r.mu.Unlock()
		status, hdr := http.StatusNoContent, http.Header(nil)
		if answer != nil {
			status, hdr = answer(req.URL.Path, n) // may take its time: not under the lock
		}
		r.mu.Lock()
		r.hits[i].status = status
		r.mu.Unlock()
		for k, v := range hdr {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) setAnswer(f func(path string, n int) (int, http.Header)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = f
}

func (r *receiver) got() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

// delivered returns the ids answered 2xx at path, in the order they came.
func (r *receiver) delivered(path string) []string {
	var out []string
	for _, h := range r.got() {
		if h.path == path && h.status >= 200 && h.status < 300 {
			out = append(out, h.id)
		}
	}
	return out
}

// eventually waits, up to 15 s, for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
