package metrics_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/ops"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// call is an admitted call of listCommandCatalog over transport.
func call(t testing.TB, transport string) *ops.Call {
	t.Helper()
	cat, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops.New(ops.Config{}, cat, ops.Ports{}).Operations() {
		if op.ID == "listCommandCatalog" {
			c, err := ops.Admit(ops.Caller{}.Via(transport), "default", op)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatal("no listCommandCatalog")
	return nil
}

func families(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	f, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// has reports whether f has a sample of exactly labels with value v (a
// histogram's: its count).
func has(f *dto.MetricFamily, v float64, labels map[string]string) bool {
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := len(got) == len(labels)
		for k, want := range labels {
			match = match && got[k] == want
		}
		val := m.GetCounter().GetValue()
		if m.Histogram != nil {
			val = float64(m.GetHistogram().GetSampleCount())
		} else if m.Gauge != nil {
			val = m.GetGauge().GetValue()
		}
		if match && val == v {
			return true
		}
	}
	return false
}

// TestMiddlewareCounts: each call at the door is counted and timed by
// transport, operation and code (OK, or the error's code; an error that
// is not agentbus's is INTERNAL_ERROR); live streams are counted while
// open, an in-process caller's as internal.
func TestMiddlewareCounts(t *testing.T) {
	m := metrics.New("test")
	ok := func(context.Context, *ops.Call, *ops.Request, ops.Emit) (*ops.Response, error) {
		return &ops.Response{}, nil
	}
	refused := func(context.Context, *ops.Call, *ops.Request, ops.Emit) (*ops.Response, error) {
		return nil, errs.New(errs.CodeForbidden, "no")
	}
	broken := func(context.Context, *ops.Call, *ops.Request, ops.Emit) (*ops.Response, error) {
		return nil, context.DeadlineExceeded
	}
	c := call(t, "a2a")
	for _, h := range []ops.Handler{ok, ok, refused, broken} {
		_, _ = m.Middleware()(h)(context.Background(), c, &ops.Request{}, nil)
	}
	closed := m.Live("rest")
	m.Live("")
	f := families(t, m)
	for _, tc := range []struct {
		family string
		labels map[string]string
		v      float64
	}{
		{"agentbus_requests_total", map[string]string{"transport": "a2a", "operation": "listCommandCatalog", "code": "OK"}, 2},
		{"agentbus_requests_total", map[string]string{"transport": "a2a", "operation": "listCommandCatalog", "code": "FORBIDDEN"}, 1},
		{"agentbus_requests_total", map[string]string{"transport": "a2a", "operation": "listCommandCatalog", "code": "INTERNAL_ERROR"}, 1},
		{"agentbus_request_duration_seconds", map[string]string{"transport": "a2a", "operation": "listCommandCatalog"}, 4},
		{"agentbus_push_streams", map[string]string{"transport": "rest"}, 1},
		{"agentbus_push_streams", map[string]string{"transport": "mcp"}, 0},
	} {
		if !has(f[tc.family], tc.v, tc.labels) {
			t.Errorf("no %s%v = %v in %v", tc.family, tc.labels, tc.v, f[tc.family])
		}
	}
	closed()
	if f := families(t, m); !has(f["agentbus_push_streams"], 0, map[string]string{"transport": "rest"}) {
		t.Errorf("the SSE stream still counted once closed: %v", f["agentbus_push_streams"])
	}
}

// TestObservers: the processor's and webhook delivery's reports move
// their families; a failed delivery is counted and not timed.
func TestObservers(t *testing.T) {
	m := metrics.New("test")
	p, w := m.Processor(), m.Webhooks()
	p.Processed("done", 20*time.Millisecond)
	p.Processed("rejected", time.Millisecond)
	p.Processed("failed", 0)
	p.Conflicted()
	p.Conflicted()
	w.Attempted("delivered", 5*time.Millisecond)
	w.Attempted("failed", time.Second)
	w.DeadLettered()
	m.Watch(metrics.Gauges{NATSConnected: func() bool { return false }, WebhookBacklog: func() time.Duration { return 90 * time.Second },
		ProcessingBacklog: func(context.Context) (float64, error) { return 7, nil }, MCPSessions: func() int { return 3 },
		PushesUnsent: func() uint64 { return 5 }})
	f := families(t, m)
	for _, tc := range []struct {
		family string
		labels map[string]string
		v      float64
	}{
		{"agentbus_commands_processed_total", map[string]string{"outcome": "done"}, 1},
		{"agentbus_commands_processed_total", map[string]string{"outcome": "rejected"}, 1},
		{"agentbus_commands_processed_total", map[string]string{"outcome": "failed"}, 1},
		{"agentbus_command_to_event_seconds", map[string]string{}, 2},
		{"agentbus_command_conflicts_total", map[string]string{}, 2},
		{"agentbus_webhook_attempts_total", map[string]string{"outcome": "delivered"}, 1},
		{"agentbus_webhook_attempts_total", map[string]string{"outcome": "failed"}, 1},
		{"agentbus_webhook_attempts_total", map[string]string{"outcome": "retrying"}, 0},
		{"agentbus_webhook_attempt_duration_seconds", map[string]string{}, 2},
		{"agentbus_webhook_dead_letters_total", map[string]string{}, 1},
		{"agentbus_nats_connected", map[string]string{}, 0},
		{"agentbus_webhook_backlog_seconds", map[string]string{}, 90},
		{"agentbus_processing_backlog", map[string]string{}, 7},
		{"agentbus_push_streams", map[string]string{"transport": "mcp"}, 3},
		{"agentbus_push_records_unsent_total", map[string]string{}, 5},
	} {
		if !has(f[tc.family], tc.v, tc.labels) {
			t.Errorf("no %s%v = %v in %v", tc.family, tc.labels, tc.v, f[tc.family])
		}
	}
	if f["go_goroutines"] == nil || f["process_cpu_seconds_total"] == nil {
		t.Error("the Go and process collectors are missing")
	}
	// Watched again (a server started again): the new gauges replace the
	// old, and a nil one is left out.
	m.Watch(metrics.Gauges{NATSConnected: func() bool { return true }})
	f = families(t, m)
	if !has(f["agentbus_nats_connected"], 1, map[string]string{}) || f["agentbus_processing_backlog"] != nil {
		t.Errorf("after a second Watch: %v, %v", f["agentbus_nats_connected"], f["agentbus_processing_backlog"])
	}
}

// BenchmarkDoor is the cost the metrics middleware adds to a call, beside
// the same call without it, in one run.
func BenchmarkDoor(b *testing.B) {
	c := call(b, "rest")
	h := func(context.Context, *ops.Call, *ops.Request, ops.Emit) (*ops.Response, error) { return nil, nil }
	ctx, r := context.Background(), &ops.Request{}
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			_, _ = h(ctx, c, r, nil)
		}
	})
	b.Run("metrics", func(b *testing.B) {
		wrapped := metrics.New("bench").Middleware()(h)
		for b.Loop() {
			_, _ = wrapped(ctx, c, r, nil)
		}
	})
}

// TestOpenMetrics: a scraper that asks for OpenMetrics gets it.
func TestOpenMetrics(t *testing.T) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
	metrics.New("test").Handler().ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") || !strings.HasSuffix(rec.Body.String(), "# EOF\n") {
		t.Fatalf("Content-Type %q, body ending %q", ct, rec.Body.String()[max(0, rec.Body.Len()-20):])
	}
}
