package deploy

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

var observabilityDir = filepath.Join(repoRoot, "deploy", "observability")

// documentedFamilies are the metric families agentbus's operations port
// serves (README, "Operating agentbus"), with the Go and process
// collectors' families the dashboard shows. They stand in for a scrape
// only while the binary has no operations listener (exposedFamilies).
var documentedFamilies = []string{
	"agentbus_requests_total",
	"agentbus_request_duration_seconds",
	"agentbus_commands_processed_total",
	"agentbus_command_to_event_seconds",
	"agentbus_command_conflicts_total",
	"agentbus_processing_backlog",
	"agentbus_webhook_attempts_total",
	"agentbus_webhook_attempt_duration_seconds",
	"agentbus_webhook_dead_letters_total",
	"agentbus_webhook_backlog_seconds",
	"agentbus_push_streams",
	"agentbus_push_records_unsent_total",
	"agentbus_nats_connected",
	"go_memstats_heap_inuse_bytes",
	"process_resident_memory_bytes",
}

// prometheusOwn are series Prometheus writes itself, not agentbus.
var prometheusOwn = map[string]bool{"up": true}

// TestAlertRules parses deploy/observability/alerts.yaml with Prometheus's
// own rule parser (unknown fields are errors; every expression and
// template is checked) and checks every metric its expressions query is
// one agentbus serves, and each rule says how bad and what it means.
func TestAlertRules(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile(filepath.Join(observabilityDir, "alerts.yaml"), false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if groups == nil || t.Failed() {
		t.FailNow()
	}
	exposed := exposedFamilies(t)
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("rule %q: not an alerting rule", r.Record)
				continue
			}
			alerts[r.Alert] = true
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: want a severity label, a summary and a description", r.Alert)
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
				continue
			}
			checkFamilies(t, "alert "+r.Alert, expr, exposed)
		}
	}
	for _, want := range []string{"AgentbusNATSDisconnected", "AgentbusProcessingBacklogGrowing", "AgentbusWebhookDeadLetters", "AgentbusRequestLatencyHigh"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// TestDashboard parses every query of the Grafana dashboard as PromQL (its
// Grafana variables replaced by values) and checks every metric it
// queries is one agentbus serves.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(observabilityDir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard title %q uid %q, %d panels", dash.Title, dash.UID, len(dash.Panels))
	}
	exposed := exposedFamilies(t)
	p := parser.NewParser(parser.Options{})
	queried := map[string]bool{}
	check := func(what, q string) {
		expr, err := p.ParseExpr(grafanaVars(q))
		if err != nil {
			t.Errorf("%s: %q: %v", what, q, err)
			return
		}
		for _, f := range checkFamilies(t, what, expr, exposed) {
			queried[f] = true
		}
	}
	for _, panel := range dash.Panels {
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q queries nothing", panel.Title)
		}
		for _, tg := range panel.Targets {
			check("panel "+panel.Title, tg.Expr)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(([^,]+),\s*\w+\)$`)
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			check("variable "+v.Name, m[1])
		}
	}
	for _, f := range documentedFamilies {
		if !queried[f] {
			t.Errorf("the dashboard shows no panel of %s", f)
		}
	}
}

// grafanaVars replaces Grafana's variables in a query by values PromQL
// takes: a range for $__rate_interval and its kin, a match-all regular
// expression for the dashboard's own variables.
func grafanaVars(q string) string {
	q = regexp.MustCompile(`\$__(rate_)?(interval|range)`).ReplaceAllString(q, "5m")
	return regexp.MustCompile(`\$\{?\w+\}?`).ReplaceAllString(q, ".*")
}

// checkFamilies fails t for each metric expr selects that is not a family
// in exposed (a histogram's _bucket, _sum and _count are its family's),
// and returns the families it selects.
func checkFamilies(t *testing.T, what string, expr parser.Expr, exposed map[string]bool) []string {
	t.Helper()
	var families []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			t.Errorf("%s: a selector without a metric name: %s", what, vs)
			return nil
		}
		if prometheusOwn[name] {
			return nil
		}
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && exposed[base] {
				family = base
			}
		}
		if !exposed[family] {
			t.Errorf("%s: queries %s, which agentbus does not serve", what, name)
		}
		families = append(families, family)
		return nil
	})
	return families
}

// exposedFamilies returns the metric families of the binary built from
// this tree: scraped from GET /metrics on its operations port after a
// command went through, or, while the binary has no operations listener,
// documentedFamilies.
func exposedFamilies(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	if !hasOpsListener(t) {
		t.Log("agentbus serve has no --ops-listen: metrics are checked against the documented families, not a scrape of /metrics")
		for _, f := range documentedFamilies {
			out[f] = true
		}
		return out
	}
	api, ops := testkit.FreeAddr(t), testkit.FreeAddr(t)
	var logs bytes.Buffer
	cmd := exec.Command(testkit.BuildAgentbus(t), "serve", "--listen", api, "--ops-listen", ops, "--nats-listen", "", "--data", t.TempDir())
	cmd.Env, cmd.Stdout, cmd.Stderr = testkit.ProcessEnv(), &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("--- agentbus serve ---\n%s", logs.String())
		}
	})
	testkit.EventuallyWithin(t, "agentbus ready", 60*time.Second, func() bool {
		resp, err := http.Get("http://" + ops + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// One command (README's walk-through), so that the request and
	// command families have series.
	body := `{"specversion":"1.0","id":"cmd-metrics","source":"deploy-test","type":"PlaceOrder",
		"datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-01T12:00:00Z",
		"data":{"orderId":"ord-1","customer":"ada","items":[{"sku":"tea","quantity":2}]}}`
	resp, err := http.Post("http://"+api+"/commands", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /commands: %s", resp.Status)
	}
	var families map[string]bool
	testkit.EventuallyWithin(t, "the command processed in /metrics", 30*time.Second, func() bool {
		families = scrape(t, "http://"+ops+"/metrics")
		return families["agentbus_commands_processed_total"]
	})
	names := make([]string, 0, len(families))
	for f := range families {
		names = append(names, f)
	}
	sort.Strings(names)
	t.Logf("agentbus serves %d families: %s", len(names), strings.Join(names, " "))
	for _, f := range documentedFamilies {
		if !families[f] {
			t.Errorf("GET /metrics has no %s (a labelled family shows once it has a series: initialise its bounded label values)", f)
		}
	}
	return families
}

// scrape returns the families GET url serves, parsed as Prometheus's text
// exposition.
func scrape(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	out := map[string]bool{}
	for name := range mfs {
		out[name] = true
	}
	return out
}

// TestScrapeFamilies checks the scrape exposedFamilies relies on: a
// histogram's series are one family under its own name, and a query of
// its _bucket series counts as that family.
func TestScrapeFamilies(t *testing.T) {
	const exposition = `# HELP agentbus_nats_connected 1 while connected to NATS.
# TYPE agentbus_nats_connected gauge
agentbus_nats_connected 1
# HELP agentbus_request_duration_seconds Request duration.
# TYPE agentbus_request_duration_seconds histogram
agentbus_request_duration_seconds_bucket{transport="rest",operation="submit",le="0.1"} 1
agentbus_request_duration_seconds_bucket{transport="rest",operation="submit",le="+Inf"} 1
agentbus_request_duration_seconds_sum{transport="rest",operation="submit"} 0.01
agentbus_request_duration_seconds_count{transport="rest",operation="submit"} 1
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(exposition))
	}))
	defer srv.Close()
	got := scrape(t, srv.URL)
	want := map[string]bool{"agentbus_nats_connected": true, "agentbus_request_duration_seconds": true}
	if !maps.Equal(got, want) {
		t.Fatalf("scraped %v, want %v", got, want)
	}
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(`histogram_quantile(0.99, sum by (le) (rate(agentbus_request_duration_seconds_bucket[5m]))) and on() agentbus_nats_connected == 1`)
	if err != nil {
		t.Fatal(err)
	}
	if fams := checkFamilies(t, "query", expr, got); !slices.Equal(fams, []string{"agentbus_request_duration_seconds", "agentbus_nats_connected"}) {
		t.Errorf("families %v", fams)
	}
}
