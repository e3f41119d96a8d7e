package readme_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// agentExampleSection is the README's example agent walk-through.
const agentExampleSection = "### Running the example agent"

// TestReadmeExampleAgent runs the README's example agent walk-through as
// written (see runTerminals): agentbus with the agent's catalogue, the
// agent registering itself, a charge that yields CustomerCharged, a second
// charge of the order that the agent rejects; and the agent logs the lines
// the README shows, one per command.
func TestReadmeExampleAgent(t *testing.T) {
	agentReady := func(t *testing.T, i int, p *program, base string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(p.out.String(), "processor running"); time.Sleep(50 * time.Millisecond) {
			if p.exited() || time.Now().After(deadline) {
				t.Fatalf("%s is not consuming (exited: %v):\n%s", p.name, p.exited(), p.out.String())
			}
		}
		if s, body := getAs(t, base+"/agents/billing-agent", "", func(s int, _ string) bool { return s == 200 }); s != 200 {
			t.Fatalf("the agent did not register: GET /agents/billing-agent %d %s", s, body)
		}
	}
	run := runTerminals(t, agentExampleSection, agentReady, "ID")
	id := run.vars["ID"]
	if len(id) != 36 {
		t.Fatalf("$ID is %q, not the correlation id POST /commands answers", id)
	}
	ev := run.recs[find(t, run.recs, 1, "the events of $ID", `/events\?correlationId=\$(ID|\{ID\})`)[0]]
	body := ev.Out
	if !strings.Contains(body, `"CustomerCharged"`) {
		_, body = getAs(t, run.base+"/events?correlationId="+id, "", func(s int, b string) bool { return strings.Contains(b, `"CustomerCharged"`) })
	}
	if types := eventTypes(t, body); len(types) != 1 || types[0] != "CustomerCharged" || !strings.Contains(body, `"chargedBy":"billing-agent"`) {
		t.Errorf("GET /events?correlationId=$ID: want one CustomerCharged by billing-agent, got %s", body)
	}
	again := run.recs[find(t, run.recs, 1, "the second charge (charge-2)", `"id":"charge-2"`)[0]]
	corr, _ := jsonOf(t, "the charge-2 submit answer", again.Out)["id"].(string)
	if rejected := waitRejected(t, run.base, corr, "charge-2"); rejected["code"] != "AGGREGATE_ALREADY_EXISTS" {
		t.Errorf("charge-2: want CommandRejected AGGREGATE_ALREADY_EXISTS, got %v", rejected)
	}

	// The agent's log: the README's lines, one per command.
	var shown []string
	for _, b := range sections(t, readme(t))[agentExampleSection] {
		if b.Lang == "text" {
			shown = append(shown, strings.Split(strings.TrimSpace(b.Text), "\n")...)
		}
	}
	if len(shown) != 2 {
		t.Fatalf("README.md %q: want the agent's two log lines in a text block, found %q", agentExampleSection, shown)
	}
	agent := run.progs[1]
	var handled []string
	for deadline := time.Now().Add(10 * time.Second); len(handled) < 2 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		handled = regexp.MustCompile(`(?m)^.*msg="handled command".*$`).FindAllString(agent.out.String(), -1)
	}
	if len(handled) != 2 {
		t.Fatalf("the agent logged %d handled commands, want 2 (one per command):\n%s", len(handled), agent.out.String())
	}
	for i, line := range shown {
		for _, kv := range logPairs(line) {
			if strings.HasPrefix(kv, "time=") || strings.HasSuffix(kv, "=…") {
				continue
			}
			if !slices.Contains(logPairs(handled[i]), kv) {
				t.Errorf("the README shows the agent logging %s; it logged:\n%s", kv, handled[i])
			}
		}
	}
	if !strings.Contains(handled[0], "correlationId="+id) {
		t.Errorf("the first line is not of $ID %s:\n%s", id, handled[0])
	}
}

// logPairs splits a text log line into its key=value pairs.
func logPairs(line string) []string {
	return regexp.MustCompile(`[A-Za-z]+=("(?:[^"\\]|\\.)*"|\S+)`).FindAllString(line, -1)
}
