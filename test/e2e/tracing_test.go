package e2e_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/agentbus/agentbus/test/testkit"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it keeps every span sent.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		body = z
	}
	raw, err := io.ReadAll(body)
	var req collector.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			o.spans = append(o.spans, ss.GetSpans()...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// named returns the spans called name.
func (o *otlpReceiver) named(name string) []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range o.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// TestTraceRunsToTheReceiver: with OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// set, a command sent with a traceparent (over REST, MCP and A2A) is one
// trace from the request span through its processing, its events' append
// and push, and the webhook attempt to the traceparent header the webhook
// receiver gets; the command's trace record names it.
func TestTraceRunsToTheReceiver(t *testing.T) {
	otlp := &otlpReceiver{}
	collectorSrv := httptest.NewServer(otlp)
	t.Cleanup(collectorSrv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collectorSrv.URL+"/v1/traces")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // milliseconds between exports
	on, shutdown, err := tracing.Setup(context.Background(), "test")
	if err != nil || !on {
		t.Fatalf("tracing.Setup: on %v, %v", on, err)
	}
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	var mu sync.Mutex
	var got []string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	s := start(t, whFast)
	id := suCreated(t, "create", postJSON(t, s.URL+"/subscriptions", suBody(rcv.URL+"/hook", []string{"OrderPlaced"}, nil)))["id"].(string)
	testkit.Eventually(t, "the subscription active", func() bool { return whStatus(t, s.URL, id) == "active" })

	openStream(t, s.URL+"/events") // a live stream the events are pushed to
	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := do(t, http.MethodPost, s.URL+"/commands", "application/json", plJSON(t, placeOrder("o-traced")),
		"traceparent", "00-"+traceID+"-"+parent+"-01")
	if r.Status != 202 {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	corr := r.JSON(t)["id"].(string)
	testkit.Eventually(t, "the delivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) > 0 })

	// The same through MCP: a typed tool called with a traceparent on
	// the HTTP request that carries the call.
	const mcpTrace, mcpParent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	client := sdk.NewClient(&sdk.Implementation{Name: "trace-test", Version: "1"}, nil)
	hc := &http.Client{Transport: headerTransport{"traceparent", "00-" + mcpTrace + "-" + mcpParent + "-01"}}
	cctx, ccancel := context.WithTimeout(context.Background(), 30e9)
	defer ccancel()
	cs, err := client.Connect(cctx, &sdk.StreamableClientTransport{Endpoint: s.URL + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "place_order",
		Arguments: map[string]any{"orderId": "o-traced-mcp", "customer": "ada", "items": []any{map[string]any{"sku": "A-1", "quantity": 1}}, "currency": "EUR"}})
	if err != nil || res.IsError {
		t.Fatalf("place_order over MCP: %v %+v", err, res)
	}
	testkit.Eventually(t, "the MCP command's delivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) > 1 })

	// And through A2A (JSON-RPC): a message with a command envelope.
	const a2aTrace, a2aParent = "5c1e2f3a4b5c6d7e8f90a1b2c3d4e5f6", "a1b2c3d4e5f60718"
	ahc := &http.Client{Transport: headerTransport{"traceparent", "00-" + a2aTrace + "-" + a2aParent + "-01"}}
	card, err := agentcard.NewResolver(ahc).Resolve(cctx, s.URL)
	if err != nil {
		t.Fatalf("resolve the agent card: %v", err)
	}
	var iface *a2a.AgentInterface
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == a2a.TransportProtocolJSONRPC && i.ProtocolVersion == a2a.Version {
			iface = i
		}
	}
	if iface == nil {
		t.Fatalf("no JSON-RPC interface on the card: %+v", card.SupportedInterfaces)
	}
	ac, err := a2aclient.NewFromEndpoints(cctx, []*a2a.AgentInterface{iface}, a2aclient.WithJSONRPCTransport(ahc))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.SendMessage(cctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(placeOrder("o-traced-a2a")))}); err != nil {
		t.Fatalf("SendMessage over A2A: %v", err)
	}
	testkit.Eventually(t, "the A2A command's delivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) > 2 })
	if tr := get(t, s.URL+"/traces/"+corr).JSON(t); tr["traceId"] != traceID {
		t.Errorf("the command's trace record has traceId %v, want %s", tr["traceId"], traceID)
	}
	// A webhook attempt's span ends once the receiver's answer is read,
	// after the receiver saw the request: wait for each to be exported.
	testkit.Eventually(t, "the webhook attempts' spans", func() bool {
		n := 0
		for _, sp := range otlp.named("webhook attempt") {
			switch hex.EncodeToString(sp.GetTraceId()) {
			case traceID, mcpTrace, a2aTrace:
				n++
			}
		}
		return n >= 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10e9)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("flushing spans: %v", err)
	}

	inTrace := func(name string) *tracepb.Span {
		t.Helper()
		for _, sp := range otlp.named(name) {
			if hex.EncodeToString(sp.GetTraceId()) == traceID {
				return sp
			}
		}
		t.Fatalf("no %q span in trace %s (%d spans of that name)", name, traceID, len(otlp.named(name)))
		return nil
	}
	req := inTrace("submitCommand")
	if hex.EncodeToString(req.GetParentSpanId()) != parent {
		t.Errorf("the request span's parent is %x, want the caller's %s", req.GetParentSpanId(), parent)
	}
	proc := inTrace("process command")
	inTrace("append events")
	inTrace("push")
	att := inTrace("webhook attempt")
	status := int64(-1)
	for _, a := range att.GetAttributes() {
		if a.GetKey() == "http.response.status_code" {
			status = a.GetValue().GetIntValue()
		}
	}
	if status != 204 {
		t.Errorf("the webhook attempt span's http.response.status_code is %d, want 204", status)
	}
	if hex.EncodeToString(proc.GetParentSpanId()) != hex.EncodeToString(req.GetSpanId()) {
		t.Errorf("the processing span's parent is %x, want the request span %x", proc.GetParentSpanId(), req.GetSpanId())
	}
	mu.Lock()
	tp, tpMCP, tpA2A := got[0], got[1], got[2]
	mu.Unlock()
	want := "00-" + traceID + "-" + hex.EncodeToString(att.GetSpanId()) + "-01"
	if tp != want {
		t.Errorf("the receiver got traceparent %q, want %q (the attempt span's)", tp, want)
	}

	// The MCP and A2A calls are one trace each too: the door's span of
	// submitCommand, the processing, the attempt, the receiver's header.
	for _, tc := range []struct{ transport, trace, header string }{{"MCP", mcpTrace, tpMCP}, {"A2A", a2aTrace, tpA2A}} {
		for _, name := range []string{"submitCommand", "process command", "webhook attempt"} {
			found := false
			for _, sp := range otlp.named(name) {
				found = found || hex.EncodeToString(sp.GetTraceId()) == tc.trace
			}
			if !found {
				t.Errorf("no %q span in the %s call's trace %s", name, tc.transport, tc.trace)
			}
		}
		if !strings.HasPrefix(tc.header, "00-"+tc.trace+"-") {
			t.Errorf("the receiver got traceparent %q for the %s command, want trace %s", tc.header, tc.transport, tc.trace)
		}
	}
}

// headerTransport sets one header on every request.
type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}
