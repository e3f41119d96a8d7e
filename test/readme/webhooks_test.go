package readme_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/secrets"
)

// webhookSection is the README's webhook walk-through.
const webhookSection = "### Receiving webhooks, step by step"

// TestReadmeWebhooks runs the README's webhook walk-through as written (see
// runTerminals): agentbus with --allow-private-webhooks, the example
// receiver, a subscription whose secret the receiver reads, an order whose
// OrderPlaced the receiver verifies and prints exactly as GET /events shows
// it, the delivery in the subscription's list, and the subscription
// deleted. The receiver prints what the README shows, and the Go lines the
// README quotes are the receiver's own.
func TestReadmeWebhooks(t *testing.T) {
	receiverReady := func(t *testing.T, i int, p *program, base string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(p.out.String(), "listening on"); time.Sleep(50 * time.Millisecond) {
			if p.exited() || time.Now().After(deadline) {
				t.Fatalf("%s is not listening (exited: %v):\n%s", p.name, p.exited(), p.out.String())
			}
		}
	}
	run := runTerminals(t, webhookSection, receiverReady, "SUB", "SUB_ID")
	if len(run.progs) != 2 {
		t.Fatalf("README.md %q: want agentbus and the receiver running beside the last block, found %d programs", webhookSection, len(run.progs))
	}
	receiver := run.progs[1]

	// The subscription: its id, and no secret in its answer; the secret,
	// read from GET /subscriptions/{id}/secret, kept where the receiver
	// reads it.
	var sub struct {
		ID      string `json:"id"`
		Webhook struct {
			URL string `json:"url"`
		} `json:"webhook"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(run.vars["SUB"]), &sub); err != nil || sub.ID == "" {
		t.Fatalf("$SUB is not the created subscription (%v): %s", err, run.vars["SUB"])
	}
	if run.vars["SUB_ID"] != sub.ID {
		t.Errorf("$SUB_ID is %q, the subscription's id %q", run.vars["SUB_ID"], sub.ID)
	}
	if sub.Webhook.URL != "http://"+run.receiver+"/" || sub.Status != "active" || strings.Contains(run.vars["SUB"], "secret") {
		t.Errorf("the subscription: want an active one at the receiver, without a secret, got %s", run.vars["SUB"])
	}
	find(t, run.recs, 1, "GET /subscriptions/$SUB_ID/secret", `/subscriptions/\$(SUB_ID|\{SUB_ID\})/secret`)
	if kept, err := os.ReadFile(run.secret); err != nil || !strings.HasPrefix(string(kept), "whsec_") || secrets.Problem(strings.TrimSpace(string(kept))) != "" {
		t.Errorf("the secret file holds %q (%v), want a generated whsec_ secret", kept, err)
	}

	// The order's OrderPlaced, as GET /events shows it.
	order := run.recs[find(t, run.recs, 1, "the order (hook-1)", `"id":"hook-1"`, `/commands\b`)[0]]
	corr, _ := jsonOf(t, "the hook-1 submit answer", order.Out)["id"].(string)
	_, page := getAs(t, run.base+"/events?correlationId="+corr, "", func(s int, b string) bool { return s == 200 && len(eventTypes(t, b)) > 0 })
	var events struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal([]byte(page), &events); err != nil || len(events.Events) != 1 || !slices.Equal(eventTypes(t, page), []string{"OrderPlaced"}) {
		t.Fatalf("GET /events?correlationId= of hook-1: want one OrderPlaced, got %s", page)
	}
	event := events.Events[0]
	eventID, _ := jsonOf(t, "the OrderPlaced event", string(event))["id"].(string)

	// The receiver verified it and printed it, exactly that envelope; it
	// refused nothing.
	var verified []string
	for deadline := time.Now().Add(10 * time.Second); len(verified) == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		verified = regexp.MustCompile(`(?m)^verified .*$`).FindAllString(receiver.out.String(), -1)
	}
	if len(verified) != 1 || strings.Contains(receiver.out.String(), "refused") {
		t.Fatalf("the receiver: want one verified delivery and nothing refused, got:\n%s", receiver.out.String())
	}
	id, body, _ := strings.Cut(strings.TrimPrefix(verified[0], "verified "), ": ")
	if id != eventID || !sameJSON(body, string(event)) {
		t.Errorf("the receiver printed\n%s\nwant webhook-id %s and the body GET /events shows:\n%s", verified[0], eventID, event)
	}

	// The deliveries the loop printed once the event was delivered.
	var list struct {
		Deliveries []struct {
			EventID  string `json:"eventId"`
			Status   string `json:"status"`
			Attempts []struct {
				StatusCode int `json:"statusCode"`
			} `json:"attempts"`
		} `json:"deliveries"`
	}
	printed := false
	for _, r := range run.recs {
		if strings.Contains(r.Out, `"deliveries"`) && json.Unmarshal([]byte(r.Out), &list) == nil {
			printed = true
		}
	}
	if !printed {
		t.Fatalf("README.md %q: no command printed the subscription's deliveries", webhookSection)
	}
	if d := list.Deliveries; len(d) != 1 || d[0].EventID != eventID || d[0].Status != "delivered" ||
		len(d[0].Attempts) == 0 || d[0].Attempts[len(d[0].Attempts)-1].StatusCode != http.StatusNoContent {
		t.Errorf("the deliveries: want the OrderPlaced delivered, its last attempt answered 204; got %+v", d)
	}

	// Deleted: 204, and gone.
	del := run.recs[find(t, run.recs, 1, "DELETE /subscriptions/$SUB_ID", `DELETE`, `/subscriptions/\$(SUB_ID|\{SUB_ID\})`)[0]]
	if !includeHeaders.MatchString(del.Cmd) {
		t.Fatalf("the deletion no longer shows its status (curl -si): %s", del.Cmd)
	}
	if a := parseHTTP(t, del); a.Status != http.StatusNoContent {
		t.Errorf("DELETE /subscriptions/$SUB_ID: %d, README says 204:\n%s", a.Status, del.Out)
	}
	if s, b := getAs(t, run.base+"/subscriptions/"+sub.ID, "", func(s int, _ string) bool { return s == 404 }); s != 404 {
		t.Errorf("GET /subscriptions/$SUB_ID after the deletion: %d %s, want 404", s, b)
	}

	// What the README says the receiver prints, "…" standing for anything.
	var shown []string
	var quoted string
	for _, b := range sections(t, readme(t))[webhookSection] {
		switch b.Lang {
		case "text":
			shown = append(shown, strings.Split(strings.TrimSpace(run.standIns(b.Text)), "\n")...)
		case "go":
			quoted = b.Text
		}
	}
	printedLines := strings.Split(strings.TrimSpace(receiver.out.String()), "\n")
	if len(shown) != len(printedLines) {
		t.Errorf("README.md %q shows the receiver printing %d lines; it printed %d:\n%s", webhookSection, len(shown), len(printedLines), receiver.out.String())
	}
	for i := 0; i < len(shown) && i < len(printedLines); i++ {
		parts := strings.Split(shown[i], "…")
		for j, p := range parts {
			parts[j] = regexp.QuoteMeta(p)
		}
		if !regexp.MustCompile(`^` + strings.Join(parts, ".*") + `$`).MatchString(printedLines[i]) {
			t.Errorf("README.md %q shows the receiver printing\n%s\nit printed\n%s", webhookSection, shown[i], printedLines[i])
		}
	}

	// The Go lines the README quotes are the receiver's.
	src, err := os.ReadFile(filepath.Join(repoRoot, "cmd/example-receiver/main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if quoted == "" || !strings.Contains(trimLines(string(src)), trimLines(quoted)) {
		t.Errorf("README.md %q quotes Go that cmd/example-receiver/main.go does not hold as written:\n%s", webhookSection, quoted)
	}
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}

// trimLines returns s with each line's leading and trailing space removed.
func trimLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "\n")
}
