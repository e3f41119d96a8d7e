package tracing_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
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

// TestPropagators: OTEL_PROPAGATORS unset or naming tracecontext carries
// trace context; none carries none — nothing is read from an HTTP request
// or a message, nothing written to a message or a webhook request, and
// Start hands back no trace; any other value is an error naming what
// agentbus takes, and leaves the switch as it was.
func TestPropagators(t *testing.T) {
	t.Cleanup(func() { // carry again, as the other tests expect
		os.Unsetenv("OTEL_PROPAGATORS")
		if _, _, err := tracing.Setup(context.Background(), "test"); err != nil || !tracing.Propagating() {
			t.Errorf("unset again: %v", err)
		}
	})
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
	}
	for _, tc := range []struct {
		value string
		carry bool
		fail  bool
	}{
		{"", true, false},
		{"tracecontext", true, false},
		{"tracecontext,baggage", true, false},
		{"baggage, tracecontext", true, false},
		{"none", false, false},
		{"b3", false, true},
		{"baggage", false, true},
		{"none,b3", false, true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			t.Setenv("OTEL_PROPAGATORS", tc.value)
			before := tracing.Propagating()
			_, _, err := tracing.Setup(context.Background(), "test")
			if tc.fail {
				if err == nil || !strings.Contains(err.Error(), "OTEL_PROPAGATORS") || !strings.Contains(err.Error(), "tracecontext") || !strings.Contains(err.Error(), "none") {
					t.Fatalf("error %v, want one naming OTEL_PROPAGATORS, tracecontext and none", err)
				}
				if tracing.Propagating() != before {
					t.Fatalf("a refused value changed the switch to %v", tracing.Propagating())
				}
				return
			}
			if err != nil || tracing.Propagating() != tc.carry {
				t.Fatalf("err %v, propagating %v; want %v", err, tracing.Propagating(), tc.carry)
			}
			var ctx context.Context
			h := tracing.FromHTTP(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { ctx = r.Context() }))
			req := httptest.NewRequest("POST", "/commands", nil)
			req.Header.Set("traceparent", parent)
			h.ServeHTTP(httptest.NewRecorder(), req)
			fromHeader := tracing.FromHeader(context.Background(), req.Header)
			ctx, span := tracing.Start(ctx, "submitCommand", trace.SpanKindServer)
			defer span.End()
			msg := bus.Header{}
			tracing.Inject(ctx, msg)
			in := bus.Header{tracing.HeaderTraceParent: {parent}}
			out := http.Header{}
			tracing.ToHTTP(tracing.Extract(context.Background(), in), out)
			// A context that holds the caller's trace, for Inject and
			// ToHTTP whatever was read.
			held := trace.ContextWithRemoteSpanContext(context.Background(), spanContext(t))
			direct, directHTTP := bus.Header{}, http.Header{}
			tracing.Inject(held, direct)
			tracing.ToHTTP(held, directHTTP)
			seen := map[string]bool{
				"FromHTTP and Start": span.SpanContext().IsValid(),
				"FromHeader":         trace.SpanContextFromContext(fromHeader).IsValid(),
				"Inject":             msg.Get(tracing.HeaderTraceParent) != "",
				"Extract and ToHTTP": out.Get("traceparent") == parent,
				"TraceID":            tracing.TraceID(in) != "",
				"Inject (held)":      direct.Get(tracing.HeaderTraceParent) != "",
				"ToHTTP (held)":      directHTTP.Get("traceparent") != "",
			}
			for what, got := range seen {
				if got != tc.carry {
					t.Errorf("%s: trace context carried %v, want %v", what, got, tc.carry)
				}
			}
		})
	}
}

// spanContext is the caller's trace context of parent, made by hand.
func spanContext(t *testing.T) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
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
