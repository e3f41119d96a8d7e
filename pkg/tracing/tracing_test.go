package tracing_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/tracing"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestSetupFollowsTheEnvironment: tracing is off without an OTLP
// endpoint, or when switched off; an unknown protocol or exporter is an
// error; with an endpoint it is on, over HTTP or gRPC.
func TestSetupFollowsTheEnvironment(t *testing.T) {
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	for _, tc := range []struct {
		name string
		env  map[string]string
		on   bool
		fail bool
	}{
		{"no endpoint", nil, false, false},
		{"http", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, false},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, false},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false, false},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false, false},
		{"unknown protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, false, true},
		{"unknown exporter", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
				t.Setenv(k, tc.env[k])
			}
			on, shutdown, err := tracing.Setup(context.Background(), "test")
			if (err != nil) != tc.fail || on != tc.on {
				t.Fatalf("on %v, err %v; want on %v, failing %v", on, err, tc.on, tc.fail)
			}
			_ = shutdown(context.Background())
		})
	}
}

// TestContextPassesThrough: without a tracer provider, a caller's trace
// context goes from an HTTP request through a span and a message's
// headers to a webhook request unchanged; a message without one gets no
// header.
func TestContextPassesThrough(t *testing.T) {
	var ctx context.Context
	h := tracing.FromHTTP(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { ctx = r.Context() }))
	req := httptest.NewRequest("POST", "/commands", nil)
	req.Header.Set("traceparent", parent)
	req.Header.Set("tracestate", "vendor=1")
	h.ServeHTTP(httptest.NewRecorder(), req)

	ctx, span := tracing.Start(ctx, "submitCommand", trace.SpanKindServer)
	defer span.End()
	msg := bus.Header{}
	tracing.Inject(ctx, msg)
	if msg.Get(tracing.HeaderTraceParent) != parent || msg.Get(tracing.HeaderTraceState) != "vendor=1" {
		t.Fatalf("message headers %v, want the caller's trace context", msg)
	}
	if id := tracing.TraceID(msg); id != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("TraceID %q", id)
	}
	out := http.Header{}
	tracing.ToHTTP(tracing.Extract(context.Background(), msg), out)
	if out.Get("traceparent") != parent {
		t.Fatalf("webhook request headers %v", out)
	}

	none := bus.Header{}
	tracing.Inject(context.Background(), none)
	if len(none) != 0 || tracing.TraceID(none) != "" {
		t.Fatalf("headers %v written without a trace context", none)
	}
	bad := bus.Header{tracing.HeaderTraceParent: {"00-zz-yy-01"}}
	if id := tracing.TraceID(bad); id != "" {
		t.Fatalf("TraceID of a malformed traceparent: %q", id)
	}
}

// BenchmarkOff is what tracing costs a command and its event with
// tracing off (no provider) and no trace context from the caller: the
// spans of the request, the processing and the append, and the headers
// looked at.
func BenchmarkOff(b *testing.B) {
	ctx := context.Background()
	h := bus.Header{bus.HeaderMsgID: {"x"}}
	for b.Loop() {
		rctx, req := tracing.Start(ctx, "submitCommand", trace.SpanKindServer)
		tracing.Inject(rctx, h)
		pctx, proc := tracing.Start(tracing.Extract(ctx, h), "process command", trace.SpanKindConsumer)
		actx, app := tracing.Start(pctx, "append events", trace.SpanKindProducer)
		tracing.Inject(actx, h)
		app.End()
		proc.End()
		req.End()
	}
}

// TestLogsNameTheTrace: a line logged with a context that holds a trace
// context names its trace id; one without does not.
func TestLogsNameTheTrace(t *testing.T) {
	var buf strings.Builder
	log := slog.New(tracing.Logs(slog.NewTextHandler(&buf, nil))).With("component", "test")
	ctx := tracing.Extract(context.Background(), bus.Header{tracing.HeaderTraceParent: {parent}})
	log.WarnContext(ctx, "about a command")
	log.Warn("about nothing")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "traceId=4bf92f3577b34da6a3ce929d0e0e4736") || strings.Contains(lines[1], "traceId") {
		t.Fatalf("log lines:\n%s", buf.String())
	}
}
