// Reading back: what every accepted command must have become, and the
// report of how the failover looked from the callers' side.

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

type page struct {
	Events []map[string]any `json:"events"`
	Next   string           `json:"next"`
}

func getPage(base, pathAndQuery string) (page, int, error) {
	var p page
	res, err := httpClient.Get(base + pathAndQuery)
	if err != nil {
		return p, 0, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return p, res.StatusCode, fmt.Errorf("GET %s: %d %s", pathAndQuery, res.StatusCode, b)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, res.StatusCode, fmt.Errorf("GET %s: %v: %s", pathAndQuery, err, b)
	}
	return p, res.StatusCode, nil
}

// checkEventsOf polls GET /events?correlationId= on alternating replicas
// until every accepted command shows exactly one OrderPlaced of its order.
// A command whose event is not visible after slowAfter is diagnosed (what
// each replica's receipt, the event stream and the consumers hold) and
// reported with the time it took; one not visible after timeout fails the
// test.
func checkEventsOf(t *testing.T, js jetstream.JetStream, bases []string, cmds []*command, slowAfter, timeout time.Duration) {
	t.Helper()
	began := time.Now()
	deadline := began.Add(timeout)
	pending := map[string]*command{}
	for _, c := range cmds {
		if c.accepted {
			pending[c.corr] = c
		}
	}
	diagnosed := map[string]bool{}
	i := 0
	for len(pending) > 0 {
		for corr, c := range pending {
			i++
			p, _, err := getPage(bases[i%len(bases)], "/events?correlationId="+corr)
			if err != nil {
				if time.Now().After(deadline) {
					t.Errorf("command %s (%s): %v", corr, c.orderID, err)
					delete(pending, corr)
				}
				continue
			}
			if len(p.Events) > 1 {
				t.Errorf("command %s (%s): %d events, want exactly one: %v", corr, c.orderID, len(p.Events), p.Events)
				delete(pending, corr)
				continue
			}
			if len(p.Events) == 1 {
				ev := p.Events[0]
				data, _ := ev["data"].(map[string]any)
				if ev["type"] != "OrderPlaced" || data["orderId"] != c.orderID {
					t.Errorf("command %s (%s): event %v, want OrderPlaced of that order", corr, c.orderID, ev)
				}
				if diagnosed[corr] {
					defect(t, "command %s (%s): its event became visible through GET /events?correlationId= only at %s, %s after the check began (the event was in the log long before: the replica's history of receipts lagged)",
						corr, c.orderID, time.Now().Format("15:04:05.000"), time.Since(began).Round(time.Millisecond))
				}
				delete(pending, corr)
				continue
			}
			if !diagnosed[corr] && time.Since(began) > slowAfter {
				diagnosed[corr] = true
				t.Logf("command %s (%s, %s) answered 202 and has no event through GET /events?correlationId= after %s:\n%s",
					corr, c.orderID, c.phase, slowAfter, diagnose(js, bases, c))
			}
			if time.Now().After(deadline) {
				t.Errorf("command %s (%s, %s) answered 202 but GET /events?correlationId= shows no event after %s:\n%s",
					corr, c.orderID, c.phase, timeout, diagnose(js, bases, c))
				delete(pending, corr)
			}
		}
		if len(pending) > 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// leaderGet reads the last message of subject from stream through the
// stream leader (not a direct get, which a lagging follower may answer).
func leaderGet(js jetstream.JetStream, stream, subject string) string {
	nc := js.Conn()
	req, _ := json.Marshal(map[string]any{"last_by_subj": subject})
	res, err := nc.Request("$JS.API.STREAM.MSG.GET."+stream, req, 3*time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	var r struct {
		Message *struct {
			Seq  uint64    `json:"seq"`
			Data []byte    `json:"data"`
			Hdrs []byte    `json:"hdrs"`
			Time time.Time `json:"time"`
		} `json:"message"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(res.Data, &r); err != nil {
		return "bad response: " + string(res.Data)
	}
	if r.Error != nil {
		return "error: " + r.Error.Description
	}
	return fmt.Sprintf("seq %d at %s: %s %s", r.Message.Seq, r.Message.Time.Format("15:04:05.000"),
		strings.TrimSpace(strings.ReplaceAll(string(r.Message.Hdrs), "\r\n", " ")), r.Message.Data)
}

// diagnose says where a command's event got stuck: the receipt each
// replica's history holds (its trace), the event stream, the consumers.
func diagnose(js jetstream.JetStream, bases []string, c *command) string {
	var b strings.Builder
	for r, base := range bases {
		fmt.Fprintf(&b, "    receipt (replica %d's history): %s\n", r, traceOf(base, c.corr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	fmt.Fprintf(&b, "    event (leader): %s\n", leaderGet(js, eventsStream, "agentbus.evt.default.order."+bus.ShardOf(c.orderID)+".OrderPlaced"))
	for _, g := range raftGroups {
		if g[1] == "" {
			continue
		}
		cons, err := js.Consumer(ctx, g[0], g[1])
		if err != nil {
			fmt.Fprintf(&b, "    consumer %s: %v\n", groupName(g), err)
			continue
		}
		info, err := cons.Info(ctx)
		if err != nil {
			fmt.Fprintf(&b, "    consumer %s: %v\n", groupName(g), err)
			continue
		}
		fmt.Fprintf(&b, "    consumer %s: delivered %d, ack floor %d, pending %d, ack pending %d, redelivered %d, waiting %d, %s\n",
			groupName(g), info.Delivered.Stream, info.AckFloor.Stream, info.NumPending, info.NumAckPending,
			info.NumRedelivered, info.NumWaiting, describe(info.Cluster))
	}
	return strings.TrimRight(b.String(), "\n")
}

// traceOf returns what GET /traces/<corr> of one replica answers.
func traceOf(base, corr string) string {
	res, err := httpClient.Get(base + "/traces/" + corr)
	if err != nil {
		return "error: " + err.Error()
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return fmt.Sprintf("%d %s", res.StatusCode, strings.TrimSpace(string(body)))
}

// walkEvents reads the whole event log page by page from one replica.
func walkEvents(t *testing.T, base string) []map[string]any {
	t.Helper()
	var all []map[string]any
	after := ""
	for pages := 0; ; pages++ {
		q := "/events?limit=250"
		if after != "" {
			q += "&after=" + url.QueryEscape(after)
		}
		p, _, err := getPage(base, q)
		if err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		if len(p.Events) == 0 {
			return all
		}
		all = append(all, p.Events...)
		if p.Next == "" || p.Next == after {
			t.Fatalf("%s: page %d has events but no new cursor (next %q)", base, pages, p.Next)
		}
		after = p.Next
		if pages > 1000 {
			t.Fatalf("%s: more than 1000 pages", base)
		}
	}
}

// checkLog checks every replica's view of the log: no event id twice, one
// OrderPlaced per accepted order and none for anything else.
func checkLog(t *testing.T, bases []string, cmds []*command) {
	t.Helper()
	want := map[string]bool{}
	for _, c := range cmds {
		if c.accepted {
			want[c.orderID] = true
		}
	}
	for _, base := range bases {
		evs := walkEvents(t, base)
		ids := map[string]int{}
		orders := map[string]int{}
		for _, ev := range evs {
			id, _ := ev["id"].(string)
			ids[id]++
			if ev["type"] == "OrderPlaced" {
				data, _ := ev["data"].(map[string]any)
				o, _ := data["orderId"].(string)
				orders[o]++
			}
		}
		for id, n := range ids {
			if n > 1 {
				t.Errorf("%s: event id %s appears %d times across GET /events pages", base, id, n)
			}
		}
		for o := range want {
			if orders[o] != 1 {
				t.Errorf("%s: order %s has %d OrderPlaced events in the log, want 1", base, o, orders[o])
			}
		}
		for o, n := range orders {
			if !want[o] {
				t.Errorf("%s: %d OrderPlaced events for order %s that was never accepted", base, n, o)
			}
		}
		t.Logf("%s: %d events in %d distinct ids, %d orders placed", base, len(evs), len(ids), len(orders))
	}
}

func checkAnswers(t *testing.T, bases []string) {
	t.Helper()
	for _, base := range bases {
		for _, path := range []string{"/.well-known/agentproto", "/events?limit=1", "/commands"} {
			res, err := httpClient.Get(base + path)
			if err != nil {
				t.Errorf("%s%s: %v", base, path, err)
				continue
			}
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Errorf("%s%s: %d", base, path, res.StatusCode)
			}
		}
	}
}

// checkCommandsStored checks the command stream holds each accepted
// command exactly once, however many times it was retried.
func checkCommandsStored(t *testing.T, js jetstream.JetStream, cmds []*command) {
	t.Helper()
	accepted := 0
	for _, c := range cmds {
		if c.accepted {
			accepted++
		}
	}
	info := testkit.StreamInfo(t, js, commandStream)
	if info.State.Msgs != uint64(accepted) {
		t.Errorf("command stream holds %d commands, %d were accepted (retries must not store a command twice)", info.State.Msgs, accepted)
	}
}

// report checks every attempt of every command and logs what the failover
// looked like from the callers' side.
func report(t *testing.T, cmds []*command, killedAt time.Time, logs []string) {
	t.Helper()
	var (
		total, retried, slow       int
		maxDur                     time.Duration
		lastFailure, firstFailure  time.Time
		byOutcome                  = map[string]int{}
		examples                   = map[string]string{}
		notSpec, wrongID, rejected []string
	)
	for _, c := range cmds {
		if !c.accepted {
			var as []string
			for _, a := range c.attempts {
				as = append(as, a.String())
			}
			t.Errorf("command %s (%s) not accepted within %s; attempts:\n  %s", c.corr, c.orderID, acceptWindow, strings.Join(as, "\n  "))
			continue
		}
		if c.gotID != c.corr {
			wrongID = append(wrongID, fmt.Sprintf("%s: 202 id %q, want %q", c.orderID, c.gotID, c.corr))
		}
		if len(c.attempts) > 1 {
			retried++
		}
		for _, a := range c.attempts {
			total++
			if a.dur > maxDur {
				maxDur = a.dur
			}
			if a.dur > slowRequest {
				slow++
			}
			key := fmt.Sprintf("%d", a.status)
			switch {
			case a.status == 0:
				key = "transport error"
			case a.status != http.StatusAccepted:
				key += " " + a.code
				if !a.specErr {
					notSpec = append(notSpec, a.String())
				}
				if a.status < 500 {
					rejected = append(rejected, a.String())
				}
			}
			byOutcome[key]++
			if a.status != http.StatusAccepted {
				if _, ok := examples[key]; !ok {
					examples[key] = a.String()
				}
				if firstFailure.IsZero() || a.at.Before(firstFailure) {
					firstFailure = a.at
				}
				if end := a.at.Add(a.dur); end.After(lastFailure) {
					lastFailure = end
				}
			}
		}
	}
	// The write outage as callers saw it: the slowest 202 and the longest
	// time without any 202 completing while the load ran after the kill.
	var ends []time.Time
	var slowestOK time.Duration
	for _, c := range cmds {
		for _, a := range c.attempts {
			if a.status == http.StatusAccepted {
				if a.dur > slowestOK {
					slowestOK = a.dur
				}
				if c.phase == "during" {
					ends = append(ends, a.at.Add(a.dur))
				}
			}
		}
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	var gap time.Duration
	var gapAt time.Time
	for i := 1; i < len(ends); i++ {
		if d := ends[i].Sub(ends[i-1]); d > gap && ends[i-1].After(killedAt) {
			gap, gapAt = d, ends[i-1]
		}
	}
	t.Logf("slowest 202: %s; longest time without any 202 completing while the load ran: %s (from %s after the kill)",
		slowestOK.Round(time.Millisecond), gap.Round(time.Millisecond), gapAt.Sub(killedAt).Round(time.Millisecond))
	keys := make([]string, 0, len(byOutcome))
	for k := range byOutcome {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t.Logf("%d commands, %d HTTP attempts, %d commands needed a retry; slowest attempt %s, %d attempts over %s",
		len(cmds), total, retried, maxDur.Round(time.Millisecond), slow, slowRequest)
	for _, k := range keys {
		t.Logf("  outcome %-40s x%d", k, byOutcome[k])
		if ex, ok := examples[k]; ok {
			t.Logf("    e.g. %s", ex)
		}
	}
	if !firstFailure.IsZero() {
		t.Logf("failures from %s to %s relative to the kill", firstFailure.Sub(killedAt).Round(time.Millisecond), lastFailure.Sub(killedAt).Round(time.Millisecond))
	}
	for _, s := range wrongID {
		t.Errorf("202 with a different correlation id: %s", s)
	}
	for _, s := range notSpec {
		t.Errorf("error response without the spec's error body: %s", s)
	}
	for _, s := range rejected {
		t.Errorf("a valid command was refused with a 4xx during failover: %s", s)
	}
	for _, c := range cmds {
		for _, a := range c.attempts {
			switch {
			case a.status >= 500 && a.status != http.StatusServiceUnavailable:
				defect(t, "%s answered %d (not 503 with Retry-After) at %s after the kill: %s",
					c.orderID, a.status, a.at.Sub(killedAt).Round(time.Millisecond), a)
			case a.status == http.StatusServiceUnavailable && a.retry == "":
				defect(t, "%s answered 503 without Retry-After: %s", c.orderID, a)
			}
			if a.dur > hangAfter {
				defect(t, "%s: POST /commands started %s after the kill hung %s: %s",
					c.orderID, a.at.Sub(killedAt).Round(time.Millisecond), a.dur.Round(time.Millisecond), a)
			}
		}
	}
	var errLines []string
	for _, l := range logs {
		if strings.Contains(l, "level=ERROR") {
			errLines = append(errLines, l)
		}
	}
	t.Logf("agentbus logged %d lines after start (%d errors)", len(logs), len(errLines))
	for i, l := range logs {
		if i >= 20 {
			t.Logf("  ... %d more", len(logs)-i)
			break
		}
		t.Logf("  %s", l)
	}
	for _, l := range errLines {
		if strings.Contains(l, "consumer stopped") {
			t.Errorf("a consumer loop ended during failover (the replica no longer processes): %s", l)
		}
	}
}

// readLog records reads made on both replicas while the node goes down.
type readLog struct {
	mu       sync.Mutex
	n        int
	failures []string
	slowest  time.Duration
	wrong    []string // 200 answers with the wrong events
}

// readClient outlives the NATS request timeout agentbus ends up with, so
// a read stuck on NATS shows how long it takes and what it finally says.
var readClient = &http.Client{Timeout: 35 * time.Second}

// poll reads from one replica until stop: the manifest, the first page of
// the log (which holds at least limit events, so a shorter page is a wrong
// answer), the events of a command accepted before the failure (exactly
// one) and the catalogue.
func (l *readLog) poll(base string, replica int, known string, stop <-chan struct{}) {
	const limit = 20
	paths := []string{fmt.Sprintf("/events?limit=%d", limit), "/.well-known/agentproto", "/events?correlationId=" + known, "/commands"}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		path := paths[i%len(paths)]
		at := time.Now()
		res, err := readClient.Get(base + path)
		status := 0
		var body []byte
		if err == nil {
			body, _ = io.ReadAll(res.Body)
			res.Body.Close()
			status = res.StatusCode
		}
		d := time.Since(at)
		wrong := ""
		if status == 200 && strings.HasPrefix(path, "/events") {
			var p page
			_ = json.Unmarshal(body, &p)
			want := limit
			if strings.Contains(path, "correlationId") {
				want = 1
			}
			if len(p.Events) != want {
				wrong = fmt.Sprintf("200 with %d events, want %d: %.300s", len(p.Events), want, body)
			}
		}
		l.mu.Lock()
		l.n++
		if d > l.slowest {
			l.slowest = d
		}
		where := fmt.Sprintf("replica %d GET %s at %s after %s", replica, path, at.Format("15:04:05.000"), d.Round(time.Millisecond))
		switch {
		case err != nil:
			l.failures = append(l.failures, where+": "+err.Error())
		case status != 200:
			l.failures = append(l.failures, fmt.Sprintf("%s: %d %s", where, status, body))
		case wrong != "":
			l.failures = append(l.failures, where+": "+wrong)
			l.wrong = append(l.wrong, where+": "+wrong)
		case d > slowRequest:
			l.failures = append(l.failures, where+": 200 but slow")
		}
		l.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
}

func (l *readLog) report(t *testing.T, killedAt time.Time) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("reads during failover: %d GETs on both replicas, slowest %s, %d failed or slow (kill at %s)",
		l.n, l.slowest.Round(time.Millisecond), len(l.failures), killedAt.Format("15:04:05.000"))
	for _, w := range l.wrong {
		defect(t, "a read answered 200 with the wrong events during failover: %s", w)
	}
	var other []string
	for _, f := range l.failures {
		if strings.Contains(f, ": 500 ") || strings.Contains(f, "Client.Timeout") {
			defect(t, "read failed with a 500 or hung during failover: %s", f)
		} else if !strings.Contains(f, "want") {
			other = append(other, f)
		}
	}
	for i, f := range other {
		if i >= 10 {
			t.Logf("  ... %d more", len(other)-i)
			break
		}
		t.Logf("  %s", f)
	}
}

// lostAcks reads the command stream and reports, for every command whose
// submission failed at least once, whether the failed attempt had in fact
// stored the command (the caller heard an error for a write that
// happened: an acknowledgement lost in the failover). Idempotent retries
// make that safe; the report says how often it happens.
func lostAcks(t *testing.T, js jetstream.JetStream, cmds []*command) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stored := map[string]time.Time{}
	count := map[string]int{}
	oc, err := js.OrderedConsumer(ctx, commandStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	for {
		batch, err := oc.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatalf("fetch commands: %v", err)
		}
		n := 0
		var pending uint64
		for m := range batch.Messages() {
			n++
			meta, _ := m.Metadata()
			corr := m.Headers().Get("Agentbus-Correlation-Id")
			count[corr]++
			stored[corr] = meta.Timestamp
			pending = meta.NumPending
		}
		if n == 0 || pending == 0 {
			break
		}
	}
	for corr, n := range count {
		if n > 1 {
			t.Errorf("command %s stored %d times", corr, n)
		}
	}
	var lost, notStored int
	for _, c := range cmds {
		if !c.accepted || len(c.attempts) < 2 {
			continue
		}
		at, ok := stored[c.corr]
		if !ok {
			t.Errorf("command %s answered 202 but is not in %s", c.corr, commandStream)
			continue
		}
		// The attempt that stored it is the last one that started before
		// the message's timestamp.
		var by attempt
		for _, a := range c.attempts {
			if !a.at.After(at) {
				by = a
			}
		}
		if by.status != http.StatusAccepted {
			lost++
			t.Logf("lost ack: %s stored at %s by an attempt the caller saw fail: %s", c.orderID, at.Format("15:04:05.000"), by)
		} else {
			notStored++
		}
	}
	t.Logf("commands retried after a failure: %d had been stored by the failed attempt (lost ack), %d were stored by the retry", lost, notStored)
}
