package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// cli runs the agentbus command args against the agentbus at url and
// returns what it printed and its error.
func cli(t *testing.T, url string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	err := run(ctx, append(args, "--url", url), &out, &errb)
	return out.String(), errb.String(), err
}

// mustCLI is cli failing t on an error.
func mustCLI(t *testing.T, url string, args ...string) string {
	t.Helper()
	out, stderr, err := cli(t, url, args...)
	if err != nil {
		t.Fatalf("agentbus %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// wantRefused fails t unless err is the API refusal code, printed as
// "CODE: message".
func wantRefused(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), code+": ") {
		t.Fatalf("got %v, want the API's %s and its message", err, code)
	}
}

func decodeJSON(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func startBus(t *testing.T, mutate ...func(*settings.Config)) string {
	t.Helper()
	s := testkit.Agentbus(t, append([]func(*settings.Config){testkit.NoNATSPort, func(c *settings.Config) { c.Webhooks.AllowPrivate = true }}, mutate...)...)
	return s.URL
}

const order = `{"orderId":"%s","customer":"ada","items":[{"sku":"tea","quantity":2}],"currency":"EUR"}`

// TestSendVerb: send prints the correlation id (or the API's answer with
// --json); --wait prints the outcome and the events, or the trace with
// --json; the data comes from the argument, a file or standard input.
func TestSendVerb(t *testing.T) {
	url := startBus(t)
	out := mustCLI(t, url, "send", "AddNote", "--data", `{"text":"from the argument"}`)
	id := strings.TrimSpace(out)
	if !uuidRE.MatchString(id) {
		t.Fatalf("send printed %q, not a correlation id", out)
	}
	var acc struct{ ID, Status string }
	decodeJSON(t, mustCLI(t, url, "send", "--json", "AddNote", "--data", `{"text":"as JSON"}`), &acc)
	if !uuidRE.MatchString(acc.ID) || acc.Status != "accepted" {
		t.Fatalf("send --json: %+v", acc)
	}

	file := filepath.Join(t.TempDir(), "order.json")
	if err := os.WriteFile(file, []byte(strings.Replace(order, "%s", "ord-file", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	out = mustCLI(t, url, "send", "PlaceOrder", "--data", "@"+file, "--wait")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !uuidRE.MatchString(lines[0]) || lines[1] != "processed" ||
		!regexp.MustCompile(`^\S+  OrderPlaced  \S+  \{"orderId":"ord-file",.*"currency":"EUR"\}$`).MatchString(lines[2]) {
		t.Fatalf("send --wait printed:\n%s", out)
	}

	stdin = strings.NewReader(`{"text":"from standard input"}`)
	t.Cleanup(func() { stdin = os.Stdin })
	var tr struct {
		ID      string
		Status  string
		Command struct{ ID, Source, Type string }
		Events  []struct {
			Type string
			Data json.RawMessage
		}
	}
	decodeJSON(t, mustCLI(t, url, "send", "AddNote", "--data", "-", "--wait", "--json", "--id", "note-stdin", "--source", "cli-tests"), &tr)
	if tr.Status != "processed" || tr.Command.ID != "note-stdin" || tr.Command.Source != "cli-tests" || len(tr.Events) != 1 ||
		oneLine(tr.Events[0].Data) != `{"text":"from standard input"}` {
		t.Fatalf("send --wait --json: %+v", tr)
	}
}

// TestSendVerbRefused: a command agentbus refuses prints the API's code,
// message and violations and fails; so does one rejected while --wait
// waits, after printing its outcome.
func TestSendVerbRefused(t *testing.T) {
	url := startBus(t)
	out, _, err := cli(t, url, "send", "PlaceOrder", "--data", `{"orderId":"ord-x"}`)
	wantRefused(t, err, "VALIDATION_FAILED")
	if out != "" || !strings.Contains(err.Error(), "\n  $.data.customer: customer is required") {
		t.Fatalf("printed %q, error %q", out, err)
	}
	_, _, err = cli(t, url, "send", "NoSuchCommand")
	wantRefused(t, err, "UNKNOWN_COMMAND_TYPE")
	if _, _, err = cli(t, url, "send", "AddNote", "--data", "{not json"); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("bad --data: %v", err)
	}
	if _, _, err = cli(t, url, "send"); err == nil || !strings.HasPrefix(err.Error(), "usage: agentbus send TYPE") {
		t.Fatalf("no type: %v", err)
	}
	data := strings.Replace(order, "%s", "ord-twice", 1)
	mustCLI(t, url, "send", "PlaceOrder", "--data", data, "--wait")
	out, _, err = cli(t, url, "send", "PlaceOrder", "--data", data, "--wait")
	wantRefused(t, err, "AGGREGATE_ALREADY_EXISTS")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || lines[1] != "rejected" || !strings.Contains(lines[2], "  CommandRejected  ") {
		t.Fatalf("a rejection waited for printed:\n%s", out)
	}
}

// TestRefusedExitStatus runs the binary: a refused command exits 1 and
// prints the API's code and message on standard error.
func TestRefusedExitStatus(t *testing.T) {
	url := startBus(t)
	bin := testkit.BuildAgentbus(t)
	cmd := exec.Command(bin, "send", "PlaceOrder", "--data", `{"orderId":"ord-x"}`)
	cmd.Env = append(testkit.ProcessEnv(), "AGENTBUS_URL="+url)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1", err)
	}
	if out.Len() != 0 || !strings.HasPrefix(stderr.String(), "agentbus: VALIDATION_FAILED: data does not match place-order/2.0\n") ||
		!strings.Contains(stderr.String(), "  $.data.customer: customer is required\n") {
		t.Fatalf("stdout %q, stderr %q", out.String(), stderr.String())
	}
	cmd = exec.Command(bin, "trace", "no-such-command", "--json")
	cmd.Env = append(testkit.ProcessEnv(), "AGENTBUS_URL="+url)
	got, err := cmd.CombinedOutput()
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || string(got) != "agentbus: TRACE_NOT_FOUND: no command with correlation id \"no-such-command\"\n" {
		t.Fatalf("trace of nothing: %v %q", err, got)
	}
}

// TestUnreachable: a client command that finds nobody at its URL says so,
// naming the address and the flag that sets it.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close() // nobody listens there now
	err = trace(context.Background(), []string{"some-id", "--url", gone}, io.Discard, io.Discard)
	want := "no agentbus answers at " + gone + "/traces/some-id (--url or AGENTBUS_URL names it): dial tcp "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want %q...", err, want)
	}
}

// TestEventsVerb: events pages the log with its filters and prints the
// next cursor; --json prints the API's page; --follow prints what is
// stored, then what is published, until interrupted.
func TestEventsVerb(t *testing.T) {
	url := startBus(t)
	var corrs []string
	for _, text := range []string{"one", "two", "three"} {
		corrs = append(corrs, strings.TrimSpace(mustCLI(t, url, "send", "AddNote", "--data", `{"text":"`+text+`"}`, "--wait")))
	}
	corrs[0] = strings.Split(corrs[0], "\n")[0]
	out := mustCLI(t, url, "events", "--type", "NoteAdded", "--limit", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], `{"text":"one"}`) || !strings.HasSuffix(lines[1], `{"text":"two"}`) || !strings.HasPrefix(lines[2], "next: ") {
		t.Fatalf("first page:\n%s", out)
	}
	out = mustCLI(t, url, "events", "--type", "NoteAdded", "--after", strings.TrimPrefix(lines[2], "next: "))
	if lines := strings.Split(strings.TrimSpace(out), "\n"); !strings.HasSuffix(lines[0], `{"text":"three"}`) {
		t.Fatalf("next page:\n%s", out)
	}
	var page struct {
		Events []struct{ Type, ID string }
		Next   string
	}
	decodeJSON(t, mustCLI(t, url, "events", "--json", "--correlation", corrs[0]), &page)
	if len(page.Events) != 1 || page.Events[0].Type != "NoteAdded" || page.Next == "" {
		t.Fatalf("events --json --correlation: %+v", page)
	}
	_, _, err := cli(t, url, "events", "--after", "not-a-cursor")
	wantRefused(t, err, "VALIDATION_FAILED")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	followed := &testkit.LockedBuffer{}
	ended := make(chan error, 1)
	go func() {
		ended <- run(ctx, []string{"events", "--follow", "--json", "--type", "NoteAdded", "--url", url}, followed, io.Discard)
	}()
	texts := func() []string {
		var got []string
		for _, l := range followed.Lines("") {
			var e struct{ Data struct{ Text string } }
			if json.Unmarshal([]byte(l), &e) == nil {
				got = append(got, e.Data.Text)
			}
		}
		return got
	}
	testkit.Eventually(t, "the stored events followed", func() bool { return len(texts()) == 3 })
	mustCLI(t, url, "send", "AddNote", "--data", `{"text":"live"}`)
	testkit.Eventually(t, "the published event followed", func() bool { return len(texts()) == 4 })
	cancel()
	if err := <-ended; err != nil {
		t.Fatalf("an interrupted follow ends with %v", err)
	}
	if got := strings.Join(texts(), ","); got != "one,two,three,live" {
		t.Fatalf("followed %s", got)
	}
}

// TestTraceVerb: trace prints the command, its status, its events and
// each webhook delivery attempt with its status and latency; --json the
// API's trace. subscriptions deliveries prints the delivered event's
// cursor, which subscriptions replay --after takes.
func TestTraceVerb(t *testing.T) {
	url := startBus(t)
	var mu sync.Mutex
	got := 0
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		got++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	sub := regexp.MustCompile(`(?m)^id\s+(\S+)$`).FindStringSubmatch(mustCLI(t, url, "subscriptions", "create", "--webhook", recv.URL, "--type", "NoteAdded"))
	if sub == nil {
		t.Fatal("create printed no id")
	}
	// A live stream the event is pushed to.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("live stream: %v %v", res, err)
	}
	defer res.Body.Close()
	go func() { _, _ = io.Copy(io.Discard, res.Body) }()
	corr := strings.Split(mustCLI(t, url, "send", "AddNote", "--data", `{"text":"traced"}`, "--id", "traced-1", "--source", "cli-tests", "--wait"), "\n")[0]
	var out string
	testkit.Eventually(t, "the trace shows the delivery and the push", func() bool {
		out = mustCLI(t, url, "trace", corr)
		return strings.Contains(out, "  delivered\n") && !strings.Contains(out, "pushes       0")
	})
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^command      AddNote  id traced-1  source cli-tests  time \S+$`),
		regexp.MustCompile(`(?m)^correlation  ` + corr + `$`),
		regexp.MustCompile(`(?m)^status       processed$`),
		regexp.MustCompile(`(?m)^events       1\n  \S+  NoteAdded  \S+  \{"text":"traced"\}$`),
		regexp.MustCompile(`(?m)^deliveries   1\n  subscription \S+  event NoteAdded \S+  delivered\n    \S+  204  \d+\.\dms$`),
		regexp.MustCompile(`(?m)^pushes       1\n  \S+  sse  NoteAdded \S+  anonymous$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("trace lacks %s", want)
		}
	}
	if t.Failed() {
		t.Fatalf("trace printed:\n%s", out)
	}
	var tr struct {
		ID         string
		Deliveries []struct {
			Attempts []struct {
				StatusCode int
				LatencyMs  float64
			}
		}
	}
	decodeJSON(t, mustCLI(t, url, "trace", "--json", corr), &tr)
	if tr.ID != corr || len(tr.Deliveries) != 1 || tr.Deliveries[0].Attempts[0].StatusCode != 204 {
		t.Fatalf("trace --json: %+v", tr)
	}
	out = mustCLI(t, url, "subscriptions", "deliveries", sub[1])
	m := regexp.MustCompile(`(?m)^event NoteAdded \S+  cursor ([A-Za-z0-9_-]{22})  correlation ` + corr + `  delivered$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("deliveries:\n%s", out)
	}
	if out := mustCLI(t, url, "subscriptions", "replay", sub[1], "--after", m[1]); out != "subscription "+sub[1]+": delivery goes on after the event of cursor "+m[1]+"\n" {
		t.Fatalf("replay after the delivery's cursor: %q", out)
	}
}

// TestRegistryVerbs: the agents, services and subscriptions commands read
// and change the registries, print text or the API's JSON, and fail with
// the API's code on a refusal.
func TestRegistryVerbs(t *testing.T) {
	url := startBus(t)
	out := mustCLI(t, url, "agents", "register", "--id", "shipper", "--name", "Shipping agent", "--accepts", "ShipOrder")
	if !regexp.MustCompile(`(?m)^id\s+shipper$`).MatchString(out) || !regexp.MustCompile(`(?m)^status\s+active$`).MatchString(out) {
		t.Fatalf("register:\n%s", out)
	}
	_, _, err := cli(t, url, "agents", "register", "--id", "shipper", "--name", "again")
	wantRefused(t, err, "AGENT_ALREADY_REGISTERED")
	if out := mustCLI(t, url, "agents", "pause", "shipper"); out != "paused agent shipper\n" {
		t.Fatalf("pause: %q", out)
	}
	_, _, err = cli(t, url, "agents", "pause", "shipper")
	wantRefused(t, err, "AGENT_ALREADY_PAUSED")
	out = mustCLI(t, url, "agents", "list")
	if !regexp.MustCompile(`(?m)^ID\s+NAME\s+STATUS\s+ACCEPTS\s+PRODUCES\n+shipper\s+Shipping agent\s+paused\s+ShipOrder`).MatchString(out) {
		t.Fatalf("list:\n%s", out)
	}
	var a struct {
		ID, Status string
		Pending    *struct{ Commands, InFlight int }
	}
	decodeJSON(t, mustCLI(t, url, "agents", "get", "shipper", "--json"), &a)
	if a.ID != "shipper" || a.Status != "paused" || a.Pending == nil || a.Pending.Commands != 0 {
		t.Fatalf("get --json: %+v", a)
	}
	if out := mustCLI(t, url, "agents", "get", "shipper"); !regexp.MustCompile(`(?m)^pending\s+0 commands waiting, 0 in flight$`).MatchString(out) {
		t.Fatalf("get:\n%s", out)
	}
	var page struct {
		Agents []struct{ ID string }
	}
	decodeJSON(t, mustCLI(t, url, "agents", "list", "--json"), &page)
	if len(page.Agents) != 1 {
		t.Fatalf("list --json: %+v", page)
	}
	mustCLI(t, url, "agents", "resume", "shipper")
	if out := mustCLI(t, url, "agents", "delete", "shipper", "--json"); out != "" {
		t.Fatalf("delete --json printed %q", out)
	}
	_, _, err = cli(t, url, "agents", "get", "shipper")
	wantRefused(t, err, "AGENT_NOT_FOUND")
	if _, _, err = cli(t, url, "agents", "get"); err == nil || !strings.HasPrefix(err.Error(), "usage: agentbus agents get ID") {
		t.Fatalf("get without id: %v", err)
	}
	if _, _, err = cli(t, url, "agents", "frobnicate"); err == nil || !strings.Contains(err.Error(), `unknown agents command "frobnicate"`) {
		t.Fatalf("unknown command: %v", err)
	}

	mustCLI(t, url, "services", "register", "--id", "billing", "--name", "Billing", "--accepts", "ChargeCustomer")
	if out := mustCLI(t, url, "services", "list"); !regexp.MustCompile(`(?m)^billing\s+Billing\s+ChargeCustomer`).MatchString(out) {
		t.Fatalf("services list:\n%s", out)
	}
	if out := mustCLI(t, url, "services", "get", "billing"); !regexp.MustCompile(`(?m)^name\s+Billing$`).MatchString(out) {
		t.Fatalf("services get:\n%s", out)
	}
	mustCLI(t, url, "services", "delete", "billing")
	_, _, err = cli(t, url, "services", "get", "billing")
	wantRefused(t, err, "SERVICE_NOT_FOUND")

	var sub struct {
		ID      string
		Status  string
		Webhook struct{ URL string }
	}
	out = mustCLI(t, url, "subscriptions", "create", "--json", "--data", `{"webhook":{"url":"https://hooks.example.com/a"}}`)
	decodeJSON(t, out, &sub)
	if sub.ID == "" || sub.Webhook.URL != "https://hooks.example.com/a" || sub.Status != "active" || strings.Contains(out, "secret") {
		t.Fatalf("create --json:\n%s", out)
	}
	out = mustCLI(t, url, "subscriptions", "create", "--webhook", "https://hooks.example.com/b", "--type", "OrderPlaced,NoteAdded")
	b := regexp.MustCompile(`(?m)^id\s+(\S+)$`).FindStringSubmatch(out)
	if b == nil || !regexp.MustCompile(`(?m)^types\s+OrderPlaced,NoteAdded$`).MatchString(out) || strings.Contains(out, "whsec_") ||
		!strings.HasSuffix(out, "\n(agentbus generated the signing secret: agentbus subscriptions secret "+b[1]+" prints it)\n") {
		t.Fatalf("create:\n%s", out)
	}
	generated := strings.TrimSuffix(mustCLI(t, url, "subscriptions", "secret", b[1]), "\n")
	if !regexp.MustCompile(`^whsec_[A-Za-z0-9+/]+=*$`).MatchString(generated) {
		t.Fatalf("secret: %q", generated)
	}
	const given = "a-secret-the-receiver-gave-0123456789"
	out = mustCLI(t, url, "subscriptions", "create", "--webhook", "https://hooks.example.com/c", "--secret", given)
	c := regexp.MustCompile(`(?m)^id\s+(\S+)$`).FindStringSubmatch(out)
	if c == nil || strings.Contains(out, "secret") {
		t.Fatalf("create --secret:\n%s", out)
	}
	var sec struct{ ID, Secret string }
	decodeJSON(t, mustCLI(t, url, "subscriptions", "secret", c[1], "--json"), &sec)
	if sec.ID != c[1] || sec.Secret != given {
		t.Fatalf("secret --json: %+v", sec)
	}
	mustCLI(t, url, "subscriptions", "delete", c[1])
	_, _, err = cli(t, url, "subscriptions", "secret", c[1])
	wantRefused(t, err, "SUBSCRIPTION_NOT_FOUND")
	if out := mustCLI(t, url, "subscriptions", "disable", sub.ID, "--reason", "maintenance"); out != "disabled subscription "+sub.ID+"\n" {
		t.Fatalf("disable: %q", out)
	}
	out = mustCLI(t, url, "subscriptions", "get", sub.ID)
	if !regexp.MustCompile(`(?m)^status\s+disabled$`).MatchString(out) || !regexp.MustCompile(`(?m)^reason\s+maintenance$`).MatchString(out) || strings.Contains(out, "whsec_") {
		t.Fatalf("get after disable:\n%s", out)
	}
	_, _, err = cli(t, url, "subscriptions", "disable", sub.ID)
	wantRefused(t, err, "CONFLICT")
	mustCLI(t, url, "subscriptions", "enable", sub.ID)
	_, _, err = cli(t, url, "subscriptions", "enable", sub.ID)
	wantRefused(t, err, "SUBSCRIPTION_ALREADY_ACTIVE")
	if out := mustCLI(t, url, "subscriptions", "list"); strings.Count(out, "https://hooks.example.com/") != 2 {
		t.Fatalf("subscriptions list:\n%s", out)
	}
	before := mustCLI(t, url, "subscriptions", "secret", sub.ID)
	out = mustCLI(t, url, "subscriptions", "rotate-secret", sub.ID)
	if !regexp.MustCompile(`(?m)^previous secret valid until\s+\S+$`).MatchString(out) || strings.Contains(out, "whsec_") ||
		!strings.HasSuffix(out, "\n(agentbus generated the new signing secret: agentbus subscriptions secret "+sub.ID+" prints it)\n") {
		t.Fatalf("rotate-secret:\n%s", out)
	}
	if after := mustCLI(t, url, "subscriptions", "secret", sub.ID); after == before || !strings.HasPrefix(after, "whsec_") {
		t.Fatalf("secret %q after rotating from %q", after, before)
	}
	const chosen = "a-secret-the-receiver-chose-0123456789"
	out = mustCLI(t, url, "subscriptions", "rotate-secret", sub.ID, "--json", "--secret", chosen)
	var rot struct{ ID, PreviousSecretValidUntil string }
	decodeJSON(t, out, &rot)
	if rot.ID != sub.ID || rot.PreviousSecretValidUntil == "" || strings.Contains(out, chosen) {
		t.Fatalf("rotate-secret --secret --json:\n%s", out)
	}
	if got := mustCLI(t, url, "subscriptions", "secret", sub.ID); got != chosen+"\n" {
		t.Fatalf("secret after rotating to a given one: %q", got)
	}
	if out := mustCLI(t, url, "subscriptions", "redeliver", sub.ID); out != "redelivering 0 dead letter(s) of subscription "+sub.ID+"\n" {
		t.Fatalf("redeliver: %q", out)
	}
	if out := mustCLI(t, url, "subscriptions", "replay", sub.ID, "--after", "0"); out != "subscription "+sub.ID+": delivery goes on from the start of the log\n" {
		t.Fatalf("replay: %q", out)
	}
	var rp struct{ ID, After string }
	decodeJSON(t, mustCLI(t, url, "subscriptions", "replay", sub.ID, "--after", "0", "--json"), &rp)
	if rp.ID != sub.ID || rp.After != "0" {
		t.Fatalf("replay --json: %+v", rp)
	}
	_, _, err = cli(t, url, "subscriptions", "replay", sub.ID, "--after", "5")
	wantRefused(t, err, "VALIDATION_FAILED")
	mustCLI(t, url, "subscriptions", "replay", sub.ID, "--since", "2026-01-02T15:04:05Z")
	if _, _, err := cli(t, url, "subscriptions", "replay", sub.ID); err == nil || !strings.Contains(err.Error(), "exactly one of --after and --since") {
		t.Fatalf("replay without where: %v", err)
	}
	_, _, err = cli(t, url, "subscriptions", "replay", "no-such-subscription", "--after", "0")
	wantRefused(t, err, "SUBSCRIPTION_NOT_FOUND")
	var ds struct{ Deliveries []any }
	decodeJSON(t, mustCLI(t, url, "subscriptions", "deliveries", sub.ID, "--json"), &ds)
	mustCLI(t, url, "subscriptions", "delete", sub.ID)
	_, _, err = cli(t, url, "subscriptions", "get", sub.ID)
	wantRefused(t, err, "SUBSCRIPTION_NOT_FOUND")
	_, _, err = cli(t, url, "subscriptions", "create", "--webhook", "ftp://x")
	wantRefused(t, err, "WEBHOOK_URL_REJECTED")
}

// TestClientVerbsCredentials: the key comes from --key or AGENTBUS_KEY,
// the tenant from --tenant or AGENTBUS_TENANT; without a key the API's
// UNAUTHENTICATED is printed.
func TestClientVerbsCredentials(t *testing.T) {
	s := testkit.Agentbus(t, testkit.NoNATSPort, func(c *settings.Config) {
		c.Auth.Type, c.Auth.TokenSigningKey, c.Limits.Rate = "bearer", "cli-tests-token-signing-key-0123456789ab", settings.Rate{}
		c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"acme", "globex"}
	})
	key := testkit.Key(t, s, []string{"acme"}, auth.ScopeRead, auth.ScopeWrite)
	_, _, err := cli(t, s.URL, "events", "--tenant", "acme")
	wantRefused(t, err, "UNAUTHENTICATED")
	mustCLI(t, s.URL, "send", "AddNote", "--data", `{"text":"acme's"}`, "--tenant", "acme", "--key", key, "--wait")
	t.Setenv("AGENTBUS_KEY", key)
	t.Setenv("AGENTBUS_TENANT", "acme")
	if out := mustCLI(t, s.URL, "events"); !strings.Contains(out, `{"text":"acme's"}`) {
		t.Fatalf("events of acme:\n%s", out)
	}
	_, _, err = cli(t, s.URL, "events", "--tenant", "globex")
	wantRefused(t, err, "FORBIDDEN")
	t.Setenv("AGENTBUS_TOKEN", "a-token")
	_, _, err = cli(t, s.URL, "events")
	if err == nil || !strings.Contains(err.Error(), "both AGENTBUS_KEY and AGENTBUS_TOKEN") {
		t.Fatalf("key and token: %v", err)
	}
}

// TestSubscriptionSecretVerb: subscriptions secret prints a
// subscription's signing secret to a key with the write scope, in the
// key's tenant; a read-only key is refused with the API's FORBIDDEN and
// exit status 1, printing nothing on standard output.
func TestSubscriptionSecretVerb(t *testing.T) {
	s := testkit.Agentbus(t, testkit.NoNATSPort, func(c *settings.Config) {
		c.Auth.Type, c.Auth.TokenSigningKey, c.Limits.Rate = "bearer", "cli-tests-token-signing-key-0123456789ab", settings.Rate{}
	})
	rw := testkit.Key(t, s, []string{"default"}, auth.ScopeRead, auth.ScopeWrite)
	ro := testkit.Key(t, s, []string{"default"}, auth.ScopeRead)
	out := mustCLI(t, s.URL, "subscriptions", "create", "--webhook", "https://hooks.example.com/secret", "--key", rw)
	m := regexp.MustCompile(`(?m)^id\s+(\S+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("create:\n%s", out)
	}
	id := m[1]
	secret := mustCLI(t, s.URL, "subscriptions", "secret", id, "--key", rw)
	if !strings.HasPrefix(secret, "whsec_") || strings.Count(secret, "\n") != 1 {
		t.Fatalf("secret printed %q", secret)
	}
	var sec struct{ ID, Secret string }
	decodeJSON(t, mustCLI(t, s.URL, "subscriptions", "secret", id, "--json", "--key", rw), &sec)
	if sec.ID != id || sec.Secret+"\n" != secret {
		t.Fatalf("secret --json: %+v, the text printed %q", sec, secret)
	}
	mustCLI(t, s.URL, "subscriptions", "get", id, "--key", ro)
	_, _, err := cli(t, s.URL, "subscriptions", "secret", id, "--key", ro)
	wantRefused(t, err, "FORBIDDEN")

	cmd := exec.Command(testkit.BuildAgentbus(t), "subscriptions", "secret", id)
	cmd.Env = append(testkit.ProcessEnv(), "AGENTBUS_URL="+s.URL, "AGENTBUS_KEY="+ro)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || stdout.Len() != 0 || !strings.HasPrefix(stderr.String(), "agentbus: FORBIDDEN: ") {
		t.Fatalf("read-only key: %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
}

// TestClientVerbsHelp: -h after each client command prints its usage and
// the connection flags, and exits 0.
func TestClientVerbsHelp(t *testing.T) {
	for _, args := range [][]string{
		{"send", "-h"}, {"events", "-h"}, {"trace", "-h"},
		{"agents", "list", "-h"}, {"services", "get", "-h"}, {"subscriptions", "create", "-h"}, {"subscriptions", "secret", "-h"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), args, &out, &out)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%v: %v", args, err)
		}
		for _, f := range []string{"url", "key", "token", "tenant", "json"} {
			if !listsFlag(out.String(), f) {
				t.Errorf("%v does not list -%s:\n%s", args, f, out.String())
			}
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"agents", "-h"}, &out, &out); err != nil || !strings.Contains(out.String(), "agentbus agents pause|resume|delete ID") {
		t.Fatalf("agents -h: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"subscriptions", "-h"}, &out, &out); err != nil ||
		!strings.Contains(out.String(), "agentbus subscriptions secret ID") || !strings.Contains(out.String(), "--after CURSOR|0|--since TIME") {
		t.Fatalf("subscriptions -h: %v\n%s", err, out.String())
	}
}

// TestClientVerbsHarmlessText: control characters in what agentbus
// relays (a rejection's message, an event's fields, an error's message)
// are printed as "?", so they cannot drive the terminal.
func TestClientVerbsHarmlessText(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/traces/x") {
			_, _ = io.WriteString(w, `{"id":"x","command":{"type":"AddNote"},"status":"rejected",
				"rejection":{"code":"NOPE","message":"\u001b[2Jcleared"},
				"events":[{"specversion":"1.0","id":"e\u0007","source":"s","type":"T\u001b]0;title\u0007","time":"t","data":{}}],
				"deliveries":[{"subscriptionId":"s","eventId":"e","status":"failed","attempts":[{"at":"2026-01-01T00:00:00Z","latencyMs":1,"response":"\u009b31mred"}]}],
				"updatedAt":"2026-01-01T00:00:00Z"}`)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"code":"BAD","message":"\u009b2J\u001b[31mred","details":{"violations":[{"path":"$.\u001b","message":"m\u0008"}]}}}`)
	}))
	defer srv.Close()
	hostile := regexp.MustCompile(`[\x00-\x08\x0b-\x1f\x7f\x{80}-\x{9f}]`)
	out := mustCLI(t, srv.URL, "trace", "x")
	if hostile.MatchString(out) || !strings.Contains(out, "NOPE: ?[2Jcleared") || !strings.Contains(out, "response: ?31mred") {
		t.Fatalf("trace printed %q", out)
	}
	_, _, err := cli(t, srv.URL, "events")
	if err == nil || hostile.MatchString(err.Error()) || !strings.HasPrefix(err.Error(), "BAD: ?2J?[31mred\n  $.?: m?") {
		t.Fatalf("error %q", err)
	}
}
