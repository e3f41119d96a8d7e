// Package tracing is agentbus's OpenTelemetry tracing: the exporter set
// up from the standard OTEL_* environment variables (off unless an OTLP
// endpoint is set), and W3C trace context (traceparent, tracestate)
// carried in HTTP and NATS message headers, so one trace runs from a
// caller's request through the command, its processing and its events to
// each webhook delivery. Envelopes never carry it: it lives in headers
// only. With tracing off, a caller's trace context still passes through
// unchanged to the webhook receivers, and no span is recorded. With
// OTEL_PROPAGATORS=none no trace context is read or written at all.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"github.com/agentbus/agentbus/pkg/bus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of agentbus's spans.
const Name = "github.com/agentbus/agentbus"

// Header names of W3C trace context, as written on NATS messages.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

var prop = propagation.TraceContext{}

// exporting says Setup installed an exporting tracer provider: until it does,
// Start makes no span, and a caller's trace context passes through.
var exporting atomic.Bool

// silent says Setup read OTEL_PROPAGATORS=none: no trace context is read
// from requests or messages, or written to messages or webhook requests.
// Off (carrying trace context) until Setup says otherwise.
var silent atomic.Bool

// Propagators are the values of OTEL_PROPAGATORS agentbus takes: W3C
// trace context, or none.
const (
	PropagatorTraceContext = "tracecontext"
	PropagatorNone         = "none"
)

// propagating reads OTEL_PROPAGATORS: unset, empty or a comma-separated
// list naming tracecontext carries trace context; none carries none;
// anything else is an error naming what agentbus takes.
func propagating(v string) (bool, error) {
	if strings.TrimSpace(v) == "" {
		return true, nil
	}
	names := strings.Split(v, ",")
	for _, n := range names {
		if strings.TrimSpace(n) == PropagatorTraceContext {
			return true, nil
		}
	}
	if len(names) == 1 && strings.TrimSpace(names[0]) == PropagatorNone {
		return false, nil
	}
	return false, fmt.Errorf("OTEL_PROPAGATORS=%q: agentbus carries W3C trace context: tracecontext (the default; a list that names it), or none", v)
}

// Setup installs the global tracer provider that exports spans over
// OTLP, as the OTEL_* environment variables say: it is on when
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is
// set, unless OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER is none;
// OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL picks http/protobuf (the default)
// or grpc; the exporter and the SDK read the others (headers, timeout,
// OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES). It
// returns whether tracing is on and the function that flushes and stops
// it (a no-op when off). An unknown protocol or exporter is an error.
//
// Setup also sets, for the whole process, whether trace context is
// carried, from OTEL_PROPAGATORS (see Propagating): unset or a list
// naming tracecontext carries it, none carries none, whatever else is an
// error, returned before anything is set up.
func Setup(ctx context.Context, version string) (on bool, shutdown func(context.Context) error, err error) {
	shutdown = func(context.Context) error { return nil }
	carry, err := propagating(os.Getenv("OTEL_PROPAGATORS"))
	if err != nil {
		return false, shutdown, err
	}
	silent.Store(!carry)
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false, shutdown, nil
	}
	switch e := os.Getenv("OTEL_TRACES_EXPORTER"); e {
	case "none":
		return false, shutdown, nil
	case "", "otlp":
	default:
		return false, shutdown, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: agentbus exports otlp or none", e)
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return false, shutdown, nil
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp *otlptrace.Exporter
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return false, shutdown, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: agentbus exports http/protobuf or grpc", protocol)
	}
	if err != nil {
		return false, shutdown, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "agentbus"), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return false, shutdown, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	exporting.Store(true)
	return true, func(ctx context.Context) error {
		exporting.Store(false)
		return tp.Shutdown(ctx)
	}, nil
}

// Tracer is agentbus's tracer, on the global tracer provider.
func Tracer() trace.Tracer { return otel.Tracer(Name) }

// On says spans are exported: without it Start makes none, so a caller
// may skip the work of one (reading a message's trace context, its
// attributes) that nothing would record.
func On() bool { return exporting.Load() }

// Propagating says trace context is carried: read from requests and
// messages (FromHTTP, FromHeader, Extract) and written to messages and
// webhook requests (Inject, ToHTTP). It is, unless Setup read
// OTEL_PROPAGATORS=none.
func Propagating() bool { return !silent.Load() }

// noSpan is the span of a context without one: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// Start starts a span of kind named name, child of ctx's span. With
// tracing off it makes none: it returns ctx and the span ctx holds (a
// caller's trace context, or none), which records nothing; with trace
// context not carried either, ctx holds none, and Start does not look.
func Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !On() {
		if !Propagating() {
			return ctx, noSpan
		}
		return ctx, trace.SpanFromContext(ctx)
	}
	return Tracer().Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// Fail records err on span (nil: nothing).
func Fail(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes(err))
	}
}

// FromHTTP returns next with the trace context of each request's
// traceparent and tracestate headers in its context (none while trace
// context is not carried: Propagating).
func FromHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Header["Traceparent"]; ok && Propagating() {
			r = r.WithContext(FromHeader(r.Context(), r.Header))
		}
		next.ServeHTTP(w, r)
	})
}

// FromHeader returns ctx with the trace context of HTTP headers h, if
// they have one and trace context is carried (for a transport whose
// handlers see the headers, not the request's context).
func FromHeader(ctx context.Context, h http.Header) context.Context {
	if _, ok := h["Traceparent"]; !ok || !Propagating() {
		return ctx
	}
	return prop.Extract(ctx, propagation.HeaderCarrier(h))
}

// ToHTTP writes ctx's trace context into h (nothing without one, or
// while trace context is not carried).
func ToHTTP(ctx context.Context, h http.Header) {
	if Propagating() && trace.SpanContextFromContext(ctx).IsValid() {
		prop.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// Inject writes ctx's trace context into a message's headers (nothing
// without one, or while trace context is not carried).
func Inject(ctx context.Context, h bus.Header) {
	if Propagating() && trace.SpanContextFromContext(ctx).IsValid() {
		prop.Inject(ctx, carrier(h))
	}
}

// Extract returns ctx with the trace context of a message's headers, if
// it has one and trace context is carried.
func Extract(ctx context.Context, h bus.Header) context.Context {
	if _, ok := h[HeaderTraceParent]; !ok || !Propagating() {
		return ctx
	}
	return prop.Extract(ctx, carrier(h))
}

// TraceID is the trace id of a message's traceparent header, or "" (also
// while trace context is not carried).
func TraceID(h bus.Header) string {
	sc := trace.SpanContextFromContext(Extract(context.Background(), h))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// Logs returns h giving each record made with a context that holds a
// trace context (a span, or a caller's) its trace id, as traceId.
func Logs(h slog.Handler) slog.Handler { return logs{h} }

type logs struct{ slog.Handler }

func (l logs) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("traceId", sc.TraceID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logs) WithAttrs(a []slog.Attr) slog.Handler { return logs{l.Handler.WithAttrs(a)} }
func (l logs) WithGroup(name string) slog.Handler   { return logs{l.Handler.WithGroup(name)} }

// carrier is a message's headers as a propagation.TextMapCarrier.
type carrier bus.Header

func (c carrier) Get(key string) string { return bus.Header(c).Get(key) }
func (c carrier) Set(key, v string)     { c[key] = []string{v} }
func (c carrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

func codes(err error) (otelcodes.Code, string) { return otelcodes.Error, err.Error() }
