package pushlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/pushlog"
)

// wire is a bus.Broadcast in memory: what is published reaches every
// subscriber of the subject at once; down refuses publishing.
type wire struct {
	mu   sync.Mutex
	subs map[string][]func([]byte)
	sent atomic.Int64
	down atomic.Bool
}

var _ bus.Broadcast = (*wire)(nil)

func (w *wire) Publish(subject string, data []byte) error {
	if w.down.Load() {
		return errs.ErrUnavailable
	}
	w.sent.Add(1)
	w.mu.Lock()
	fns := w.subs[subject]
	w.mu.Unlock()
	for _, fn := range fns {
		fn(append([]byte(nil), data...))
	}
	return nil
}

func (w *wire) Subscribe(_ context.Context, subject string, fn func([]byte)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs == nil {
		w.subs = map[string][]func([]byte){}
	}
	w.subs[subject] = append(w.subs[subject], fn)
	return nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func started(t *testing.T, w bus.Broadcast, cfg pushlog.Config) *pushlog.Log {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := pushlog.New(cfg, w, "agentbus.pushed", quiet)
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
	}
}

// TestLogReplicas: a push recorded on one replica is in the other's store
// after the next batch, once (not twice on its own), and not another
// tenant's; a batch NATS does not take is dropped and counted.
func TestLogReplicas(t *testing.T) {
	t.Parallel()
	w := &wire{}
	a := started(t, w, pushlog.Config{Flush: 10 * time.Millisecond})
	b := started(t, w, pushlog.Config{Flush: 10 * time.Millisecond})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a.Add("acme", "c1", rec(pushlog.SSE, "e1", at))
	if got, _ := a.Of("acme", "c1"); len(got) != 1 {
		t.Fatalf("the replica that pushed: %v, want its push at once", got)
	}
	eventually(t, "the other replica has it", func() bool { got, _ := b.Of("acme", "c1"); return len(got) == 1 })
	if got, _ := b.Of("acme", "c1"); got[0] != rec(pushlog.SSE, "e1", at) {
		t.Errorf("received %+v", got[0])
	}
	time.Sleep(30 * time.Millisecond) // its own batch came back to a meanwhile
	if got, _ := a.Of("acme", "c1"); len(got) != 1 {
		t.Errorf("the replica that pushed holds %d pushes, want 1 (not its own batch again)", len(got))
	}
	if got, _ := b.Of("globex", "c1"); len(got) != 0 {
		t.Errorf("another tenant: %v", got)
	}

	w.down.Store(true)
	a.Add("acme", "c2", rec(pushlog.MCP, "e2", at))
	eventually(t, "the batch NATS refused counted", func() bool { return a.Dropped() == 1 })
	if got, _ := a.Of("acme", "c2"); len(got) != 1 {
		t.Errorf("kept here all the same: %v", got)
	}
	w.down.Store(false)
	a.Add("acme", "c3", rec(pushlog.A2A, "e3", at))
	eventually(t, "sending again", func() bool { got, _ := b.Of("acme", "c3"); return len(got) == 1 })
	if got, _ := b.Of("acme", "c2"); len(got) != 0 {
		t.Errorf("a dropped batch was sent later: %v", got)
	}
}

// TestLogBoundsWaiting: while nothing is sent, at most Waiting pushes wait;
// the rest are counted, and Add does not block.
func TestLogBoundsWaiting(t *testing.T) {
	t.Parallel()
	w := &wire{}
	l := pushlog.New(pushlog.Config{Batch: 4, Waiting: 8}, w, "agentbus.pushed", quiet) // never Run
	at := time.Now()
	for i := range 20 {
		l.Add("acme", fmt.Sprint("c", i), rec(pushlog.SSE, "e", at))
	}
	if l.Dropped() != 12 {
		t.Fatalf("dropped %d, want 12", l.Dropped())
	}
}

// TestLogRefusesForeignRecords: records no replica makes (an unknown
// transport, an invalid tenant or id, no time, labels past their bound)
// are left out; the others of the batch are kept.
func TestLogRefusesForeignRecords(t *testing.T) {
	t.Parallel()
	w := &wire{}
	l := started(t, w, pushlog.Config{})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	long := string(make([]byte, 200))
	recs := []map[string]any{
		{"tenant": "acme", "correlationId": "ok", "transport": "sse", "eventId": "e", "at": at},
		{"tenant": "acme", "correlationId": "bad", "transport": "smtp", "eventId": "e", "at": at},
		{"tenant": "Not A Tenant", "correlationId": "bad", "transport": "sse", "eventId": "e", "at": at},
		{"tenant": "acme", "correlationId": "bad.id", "transport": "sse", "eventId": "e", "at": at},
		{"tenant": "acme", "correlationId": "bad", "transport": "sse", "eventId": "e"},
		{"tenant": "acme", "correlationId": "bad", "transport": "sse", "eventId": "e", "at": at, "listener": long},
	}
	data, _ := json.Marshal(map[string]any{"from": "elsewhere", "records": recs})
	if err := w.Publish("agentbus.pushed", data); err != nil {
		t.Fatal(err)
	}
	_ = w.Publish("agentbus.pushed", []byte("not json"))
	if got, _ := l.Of("acme", "ok"); len(got) != 1 {
		t.Errorf("the valid record: %v", got)
	}
	if got, _ := l.Of("acme", "bad"); len(got) != 0 {
		t.Errorf("records no replica makes kept: %+v", got)
	}
}

// BenchmarkAdd is the cost a push adds to the stream that made it: the
// record kept and queued for the next batch.
func BenchmarkAdd(b *testing.B) {
	w := &wire{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := pushlog.New(pushlog.Config{}, w, "agentbus.pushed", quiet)
	if err := l.Start(ctx); err != nil {
		b.Fatal(err)
	}
	go l.Run(ctx)
	corrs := make([]string, 1024)
	for i := range corrs {
		corrs[i] = fmt.Sprint("command-", i)
	}
	r := rec(pushlog.SSE, "0194c7a2-5e4b-7c1d-9f3a-2b8e6d4c1a07", time.Now())
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Add("acme", corrs[i%len(corrs)], r)
			i++
		}
	})
}

// TestLogSendsWhatItKeeps: the pushes of a command past its PerCommand
// records are counted where they were made and not sent: the wire carries
// at most PerCommand records a command, however many listeners it has.
func TestLogSendsWhatItKeeps(t *testing.T) {
	t.Parallel()
	w := &wire{}
	var onWire atomic.Int64
	if err := w.Subscribe(context.Background(), "agentbus.pushed", func(data []byte) {
		var b struct{ Records []json.RawMessage }
		if json.Unmarshal(data, &b) == nil {
			onWire.Add(int64(len(b.Records)))
		}
	}); err != nil {
		t.Fatal(err)
	}
	a := started(t, w, pushlog.Config{Flush: 10 * time.Millisecond, PerCommand: 4})
	b := started(t, w, pushlog.Config{Flush: 10 * time.Millisecond, PerCommand: 4})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 10 {
		a.Add("acme", "c1", rec(pushlog.SSE, fmt.Sprintf("e%d", i), at))
	}
	eventually(t, "the other replica has the kept ones", func() bool { got, _ := b.Of("acme", "c1"); return len(got) == 4 })
	time.Sleep(50 * time.Millisecond) // any further batch would be sent by now
	if n := onWire.Load(); n != 4 {
		t.Errorf("%d records sent, want the 4 kept", n)
	}
	if got, omitted := a.Of("acme", "c1"); len(got) != 4 || omitted != 6 {
		t.Errorf("the replica that pushed: %d kept, %d omitted; want 4 and 6", len(got), omitted)
	}
}
