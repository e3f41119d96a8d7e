package e2e_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads the exposition at url into its families.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d", res.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parsing the exposition: %v", err)
	}
	return fams
}

// value is the value of the sample of family name whose labels include
// labels (name, value pairs): a counter's or gauge's value, a histogram's
// count; -1 when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			return m.GetUntyped().GetValue()
		}
	}
	return -1
}

// TestMetricsMove: GET /metrics while commands are processed, one is
// rejected, a webhook is delivered (and held up), an event is
// dead-lettered and an SSE stream is open: each family moves as it
// should, with bounded labels, next to the Go and process collectors.
func TestMetricsMove(t *testing.T) {
	t.Parallel()
	s := start(t, whFast)
	ms := httptest.NewServer(s.Metrics())
	t.Cleanup(ms.Close)
	url := ms.URL + "/metrics"

	// A receiver that can hold a delivery back, then answer as told.
	var mu sync.Mutex
	answer, gate := http.StatusNoContent, make(chan struct{})
	close(gate)
	var hits int
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		g, a := gate, answer
		hits++
		mu.Unlock()
		<-g
		w.WriteHeader(a)
	}))
	t.Cleanup(rcv.Close)
	id := suCreated(t, "create", postJSON(t, s.URL+"/subscriptions", suBody(rcv.URL+"/hook", []string{"OrderPlaced"}, nil)))["id"].(string)
	testkit.Eventually(t, "the subscription active", func() bool { return whStatus(t, s.URL, id) == "active" })

	before := scrape(t, url)
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "agentbus_nats_connected",
		"agentbus_processing_backlog", "agentbus_webhook_backlog_seconds", "agentbus_push_streams",
		"agentbus_commands_processed_total", "agentbus_command_conflicts_total", "agentbus_webhook_attempts_total", "agentbus_webhook_dead_letters_total",
		"agentbus_push_records_unsent_total"} {
		if before[name] == nil {
			t.Errorf("no family %s", name)
		}
	}
	if v := value(before, "agentbus_nats_connected"); v != 1 {
		t.Errorf("agentbus_nats_connected %v, want 1", v)
	}

	st := openStream(t, s.URL+"/events")
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "metrics-test", Version: "1"}, nil).
		Connect(cctx, &sdk.StreamableClientTransport{Endpoint: s.URL + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Held up: the delivery waits at the receiver while its event ages.
	mu.Lock()
	gate = make(chan struct{})
	held := gate
	mu.Unlock()
	submitCommand(t, s.URL, placeOrder("o-m1"))
	testkit.Eventually(t, "the delivery at the receiver", func() bool { mu.Lock(); defer mu.Unlock(); return hits == 1 })
	time.Sleep(1100 * time.Millisecond)
	during := scrape(t, url)
	if v := value(during, "agentbus_push_streams", "transport", "rest"); v != 1 {
		t.Errorf("agentbus_push_streams{transport=rest} %v with one SSE stream open, want 1", v)
	}
	if v := value(during, "agentbus_push_streams", "transport", "mcp"); v != 1 {
		t.Errorf("agentbus_push_streams{transport=mcp} %v with one MCP session open, want 1", v)
	}
	if v := value(during, "agentbus_webhook_backlog_seconds"); v < 1 {
		t.Errorf("agentbus_webhook_backlog_seconds %v while a delivery is held up for a second, want >= 1", v)
	}
	close(held)

	// A rejection: the same order placed again.
	corr := submitCommand(t, s.URL, placeOrder("o-m1"))
	if ev := eventsOf(t, s.URL, corr, 1)[0]; ev["type"] != "CommandRejected" {
		t.Fatalf("event %v, want CommandRejected", ev)
	}
	// A refused call: an unknown command type.
	r := postJSON(t, s.URL+"/commands", command("NoSuchCommand", "", map[string]any{}))
	if r.Status/100 != 4 {
		t.Fatalf("unknown command: %d %s", r.Status, r.Body)
	}
	refused := r.errorCode(t)
	// A dead letter: the receiver fails every attempt of the next event.
	mu.Lock()
	answer = http.StatusInternalServerError
	mu.Unlock()
	submitCommand(t, s.URL, placeOrder("o-m2"))
	testkit.Eventually(t, "the subscription failing", func() bool { return whStatus(t, s.URL, id) == "failing" })
	st.close()
	cs.Close()

	var after map[string]*dto.MetricFamily
	delta := func(name string, labels ...string) float64 {
		return value(after, name, labels...) - max(value(before, name, labels...), 0)
	}
	testkit.Eventually(t, "the families moved", func() bool {
		after = scrape(t, url)
		return delta("agentbus_webhook_dead_letters_total") >= 1 && value(after, "agentbus_push_streams", "transport", "rest") == 0 &&
			value(after, "agentbus_push_streams", "transport", "mcp") == 0 &&
			value(after, "agentbus_processing_backlog") == 0 && value(after, "agentbus_webhook_backlog_seconds") == 0
	})
	for _, c := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"agentbus_requests_total", []string{"transport", "rest", "operation", "submitCommand", "code", "OK"}, 3},
		{"agentbus_requests_total", []string{"transport", "rest", "operation", "submitCommand", "code", refused}, 1},
		{"agentbus_requests_total", []string{"transport", "rest", "operation", "listEvents", "code", "OK"}, 1},
		{"agentbus_request_duration_seconds", []string{"transport", "rest", "operation", "submitCommand"}, 4},
		{"agentbus_commands_processed_total", []string{"outcome", "done"}, 2},
		{"agentbus_commands_processed_total", []string{"outcome", "rejected"}, 1},
		{"agentbus_command_to_event_seconds", nil, 3},
		{"agentbus_webhook_attempts_total", []string{"outcome", "delivered"}, 1},
		{"agentbus_webhook_attempts_total", []string{"outcome", "retrying"}, 2},
		{"agentbus_webhook_attempts_total", []string{"outcome", "failed"}, 1},
		{"agentbus_webhook_attempt_duration_seconds", nil, 4},
		{"agentbus_webhook_dead_letters_total", nil, 1},
	} {
		if d := delta(c.name, c.labels...); d < c.min {
			t.Errorf("%s%v moved by %v, want at least %v", c.name, c.labels, d, c.min)
		}
	}
	// Bounded labels: no tenant, subscription or correlation id.
	for name, f := range after {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == id || l.GetValue() == corr || l.GetName() == "tenant" {
					t.Errorf("%s has the label %s=%s", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// TestMetricsOff: with ops.metrics false agentbus serves and processes
// commands as ever, and GET /metrics answers 404 with a body that says
// metrics are off and names the setting, however much it has done.
func TestMetricsOff(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *settings.Config) { c.Ops.Metrics = false })
	corr := submitCommand(t, s.URL, placeOrder("o-off"))
	eventsOf(t, s.URL, corr, 1)
	ms := httptest.NewServer(s.Metrics())
	t.Cleanup(ms.Close)
	res := get(t, ms.URL+"/metrics")
	if res.Status != http.StatusNotFound || !strings.Contains(string(res.Body), "ops.metrics") ||
		!strings.Contains(string(res.Body), "off") || strings.Contains(string(res.Body), "agentbus_") {
		t.Fatalf("GET /metrics with ops.metrics false: %d %s", res.Status, res.Body)
	}
}
