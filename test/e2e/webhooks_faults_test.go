package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// Settings of the faulty receiver's agentbus.
const (
	faultTimeout   = 500 * time.Millisecond
	faultRetry     = 100 * time.Millisecond // each wait of the schedule, ±20 % jitter
	faultReadBytes = 4096                   // webhooks.maxResponseBytes
	faultHuge      = 64 << 20               // the huge answer's body
)

// faultHit is one attempt as the receiver saw it.
type faultHit struct {
	at      time.Time
	id      string // webhook-id
	eventID string // the envelope's id
	status  int    // what the receiver answered; 0 when it never did
}

// faultReceiver answers each attempt at an event by the script named in
// its orderId ("o-<script>-…"), attempt after attempt.
type faultReceiver struct {
	url     string
	trap    string       // where its redirects point: another server
	trapped atomic.Int64 // requests that server got
	mu      sync.Mutex
	hits    []faultHit
	tail    atomic.Int64 // bytes of the huge answer written
}

// faultScripts: what each attempt at an event gets. A step is a status
// and how the answer is sent.
var faultScripts = map[string][]string{
	"timeout":  {"hang", "200"},                 // no answer within webhooks.timeout
	"5xx":      {"502", "503", "200"},           // failures, retried on the schedule
	"429":      {"429 retry-after 2", "200"},    // Retry-After holds the retry back 2 s
	"redirect": {"307 trap", "302 trap", "200"}, // never followed
	"slow":     {"500 trickle", "200 slow"},     // a body past the timeout; one within it
	"stalled":  {"200 stall"},                   // 2xx, then the body stops: delivered
	"huge":     {"500 limit then stall", "200 huge"},
	"fine":     {"200"},
}

func newFaultReceiver(t *testing.T) *faultReceiver {
	r := &faultReceiver{}
	trap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.trapped.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(trap.Close)
	r.trap = trap.URL + "/trap"
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/hook"
	return r
}

func (r *faultReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var env struct {
		ID   string `json:"id"`
		Data struct {
			OrderID string `json:"orderId"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &env)
	h := faultHit{at: time.Now(), id: req.Header.Get("webhook-id"), eventID: env.ID}
	r.mu.Lock()
	n := 0
	for _, p := range r.hits {
		if p.eventID == h.eventID {
			n++
		}
	}
	r.hits = append(r.hits, h)
	i := len(r.hits) - 1
	r.mu.Unlock()
	script := faultScripts[strings.Split(env.Data.OrderID, "-")[1]]
	step := "200"
	if n < len(script) {
		step = script[n]
	}
	answered := func(status int) {
		r.mu.Lock()
		r.hits[i].status = status
		r.mu.Unlock()
	}
	ctx, flush := req.Context(), w.(http.Flusher).Flush
	hangUp := func() { // until agentbus hangs up (its timeout), at most 30 s
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
		}
	}
	fields := strings.Fields(step)
	if fields[0] == "hang" {
		hangUp()
		return
	}
	status, _ := strconv.Atoi(fields[0])
	mode := strings.Join(fields[1:], " ")
	switch mode {
	case "retry-after 2":
		w.Header().Set("Retry-After", "2")
	case "trap":
		w.Header().Set("Location", r.trap)
	}
	answered(status)
	w.WriteHeader(status)
	switch mode {
	case "trickle": // a byte every 50 ms until agentbus hangs up
		for ctx.Err() == nil {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			flush()
			time.Sleep(50 * time.Millisecond)
		}
	case "slow": // four parts 40 ms apart: well within the timeout
		for p := range 4 {
			_, _ = w.Write([]byte("part-" + strconv.Itoa(p) + ";"))
			flush()
			time.Sleep(40 * time.Millisecond)
		}
	case "stall":
		_, _ = w.Write([]byte("accepted"))
		flush()
		hangUp()
	case "limit then stall": // what agentbus reads, then nothing more
		_, _ = w.Write([]byte(strings.Repeat("L", faultReadBytes)))
		flush()
		hangUp()
	case "huge": // faultHuge bytes, as fast as agentbus takes them
		chunk := []byte(strings.Repeat("H", 64<<10))
		for range faultHuge / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			r.tail.Add(int64(len(chunk)))
		}
	}
}

func (r *faultReceiver) all() []faultHit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.hits)
}

// delivered returns the events answered 2xx, in the order they came.
func (r *faultReceiver) delivered() []string {
	var out []string
	for _, h := range r.all() {
		if h.status >= 200 && h.status < 300 {
			out = append(out, h.eventID)
		}
	}
	return out
}

// faultRecord is a delivery record as listDeliveries answers it.
type faultRecord struct {
	EventID  string `json:"eventId"`
	Status   string `json:"status"`
	Attempts []struct {
		StatusCode int    `json:"statusCode"`
		Error      string `json:"error"`
		Response   string `json:"response"`
	} `json:"attempts"`
}

// TestWebhookFaultyReceiver: a receiver that times out, answers 5xx, 429
// with Retry-After, redirects, sends its body slowly, stops it halfway or
// sends far too much gets every event, in order, each once answered 2xx;
// each retry comes no sooner than its schedule (or Retry-After) says, no
// redirect is followed, at most webhooks.maxResponseBytes of an answer is
// read, and the records keep at most its first KiB.
func TestWebhookFaultyReceiver(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *settings.Config) {
		suLoopback(c)
		c.Webhooks.Timeout = settings.Duration(faultTimeout)
		c.Webhooks.MaxResponseBytes = faultReadBytes
		c.Webhooks.RetrySchedule = []settings.Duration{settings.Duration(faultRetry), settings.Duration(faultRetry), settings.Duration(faultRetry)}
	})
	rcv := newFaultReceiver(t)
	sub := suCreated(t, "create", postJSON(t, s.URL+"/subscriptions", suBody(rcv.url, []string{"OrderPlaced"}, nil)))["id"].(string)

	order := []string{"timeout", "5xx", "429", "redirect", "slow", "stalled", "huge", "fine"}
	var ids []string
	for i, script := range order {
		eid, _ := whEventID(t, s.URL, submitCommand(t, s.URL, placeOrder("o-"+script+"-"+string(rune('a'+i)))))
		ids = append(ids, eid)
	}
	testkit.EventuallyWithin(t, "every event delivered", 30*time.Second, func() bool { return len(rcv.delivered()) >= len(ids) })
	time.Sleep(300 * time.Millisecond) // a repeat would come by now
	if n := rcv.trapped.Load(); n != 0 {
		t.Errorf("a redirect was followed: the server it points to got %d requests", n)
	}
	if got := rcv.delivered(); !slices.Equal(got, ids) {
		t.Fatalf("answered 2xx: %v, want each of %v once, in order", got, ids)
	}

	// Each event got the attempts its script has, with its own id as
	// webhook-id, each retry no sooner than the schedule allows.
	byEvent := map[string][]faultHit{}
	for _, h := range rcv.all() {
		if h.id != h.eventID {
			t.Errorf("webhook-id %s on event %s", h.id, h.eventID)
		}
		byEvent[h.eventID] = append(byEvent[h.eventID], h)
	}
	for i, script := range order {
		hits := byEvent[ids[i]]
		if len(hits) != len(faultScripts[script]) {
			t.Errorf("%s: %d attempts, want %d", script, len(hits), len(faultScripts[script]))
			continue
		}
		for k := 1; k < len(hits); k++ {
			least := faultRetry * 8 / 10
			if script == "429" {
				least = 2 * time.Second
			}
			if gap := hits[k].at.Sub(hits[k-1].at); gap < least {
				t.Errorf("%s: attempt %d came %v after the one before, sooner than %v", script, k+1, gap, least)
			}
		}
	}

	// The records: what each attempt got, at most a KiB of each answer.
	list := get(t, s.URL+"/subscriptions/"+sub+"/deliveries")
	var recs struct {
		Deliveries []faultRecord `json:"deliveries"`
	}
	if err := json.Unmarshal(list.Body, &recs); err != nil || len(recs.Deliveries) != len(ids) {
		t.Fatalf("listDeliveries: %d %s", list.Status, list.Body)
	}
	for i, rec := range recs.Deliveries {
		script := order[i]
		if rec.EventID != ids[i] || rec.Status != "delivered" || len(rec.Attempts) != len(faultScripts[script]) {
			t.Errorf("%s: record %+v", script, rec)
			continue
		}
		for k, a := range rec.Attempts {
			if len(a.Response) > 1024 {
				t.Errorf("%s attempt %d: the record keeps %d bytes of the answer, over 1 KiB", script, k+1, len(a.Response))
			}
		}
		a := rec.Attempts
		check := func(ok bool, what string) {
			if !ok {
				var got []string
				for _, x := range a {
					got = append(got, fmt.Sprintf("%d %q %d bytes", x.StatusCode, x.Error, len(x.Response)))
				}
				t.Errorf("%s: %s; attempts %v", script, what, got)
			}
		}
		switch script {
		case "timeout":
			check(a[0].StatusCode == 0 && a[0].Error == "timed out", "the first attempt timed out")
		case "429":
			check(a[0].StatusCode == 429, "the first attempt got 429")
		case "redirect":
			check(a[0].StatusCode == 307 && a[0].Error == "redirect to "+rcv.trap+" not followed" &&
				a[1].StatusCode == 302, "the redirects are failed attempts, not followed")
		case "slow":
			check(a[0].StatusCode == 500 && a[0].Error == "reading the answer: timed out",
				"a body still coming at the timeout ends the attempt")
			check(a[1].StatusCode == 200 && a[1].Error == "" && a[1].Response == "part-0;part-1;part-2;part-3;",
				"a slow body within the timeout is read whole")
		case "stalled":
			check(a[0].StatusCode == 200 && a[0].Error == "reading the answer: timed out" && a[0].Response == "accepted",
				"a 2xx whose body stops is delivered, the record says the body timed out")
		case "huge":
			// Reading stopped at maxResponseBytes: had it gone on, the
			// stalled body would have timed out.
			check(a[0].StatusCode == 500 && a[0].Error == "" && a[0].Response == strings.Repeat("L", 1024),
				"an answer read up to maxResponseBytes, its first KiB kept")
			check(a[1].StatusCode == 200 && a[1].Error == "" && a[1].Response == strings.Repeat("H", 1024),
				"a huge 2xx answer is delivered, its first KiB kept")
		}
	}
	if st := whStatus(t, s.URL, sub); st != "active" {
		t.Fatalf("subscription %s after every event was delivered", st)
	}
	// Nor was the huge answer read to its end: agentbus closed the
	// connection, and the receiver could not write it all.
	if n := rcv.tail.Load(); n >= faultHuge {
		t.Fatalf("the huge answer was read whole (%d bytes)", n)
	} else {
		t.Logf("the huge answer: %d of %d MiB written before agentbus closed the connection", n>>20, faultHuge>>20)
	}
}
