package crash_test

// A crash test of webhook delivery: agentbus, on an external nats-server,
// is killed with SIGKILL while deliveries to a slow receiver are in
// flight, and started again on the same NATS. Nothing is lost: every
// event reaches every subscription, in order; a delivery cut by the kill
// comes again, with the same webhook-id.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
)

const (
	whEvents  = 40                     // commands submitted, one OrderPlaced each
	whHeldAt  = 10                     // the event of /a held at the receiver when agentbus is killed
	whAnswer  = 150 * time.Millisecond // how long the receiver takes over each delivery
	whFailing = 5                      // every 5th event's first attempt (from the 3rd) answered 503
)

// whHit is one delivery attempt as the receiver saw it.
type whHit struct {
	path, id, eventID string // webhook-id, and the envelope's id
	run               int32  // the agentbus run that sent it
	status            int    // the receiver's answer; 0 while it has none
}

// whReceiver answers each delivery after whAnswer, 200 but for the first
// attempt of some events (503, for a retry state to survive the kill); it
// holds the whHeldAt-th event of /a without an answer until the
// connection is gone.
type whReceiver struct {
	url  string
	run  atomic.Int32
	held chan string // the held event's id, once it arrived
	mu   sync.Mutex
	hits []whHit
}

func newWHReceiver(t *testing.T) *whReceiver {
	r := &whReceiver{held: make(chan string, 1)}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func (r *whReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var env struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &env)
	h := whHit{path: req.URL.Path, id: req.Header.Get("webhook-id"), eventID: env.ID, run: r.run.Load()}
	r.mu.Lock()
	var distinct []string // the events this path got, in order
	for _, p := range r.hits {
		if p.path == h.path && !slices.Contains(distinct, p.eventID) {
			distinct = append(distinct, p.eventID)
		}
	}
	first := !slices.Contains(distinct, h.eventID)
	nth := len(distinct) + 1 // of a first arrival
	r.hits = append(r.hits, h)
	i := len(r.hits) - 1
	r.mu.Unlock()
	ctx := req.Context()
	switch {
	case first && h.path == "/a" && nth == whHeldAt:
		r.held <- h.eventID
		select { // no answer: the kill cuts this delivery
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		return
	case first && nth%whFailing == 3:
		r.answer(i, w, http.StatusServiceUnavailable)
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(whAnswer):
	}
	r.answer(i, w, http.StatusOK)
}

func (r *whReceiver) answer(i int, w http.ResponseWriter, status int) {
	r.mu.Lock()
	r.hits[i].status = status
	r.mu.Unlock()
	w.WriteHeader(status)
}

func (r *whReceiver) at(path string) []whHit {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []whHit
	for _, h := range r.hits {
		if h.path == path {
			out = append(out, h)
		}
	}
	return out
}

// delivered returns the events path answered 2xx, each once, in the order
// of their first 2xx.
func (r *whReceiver) delivered(path string) []string {
	var out []string
	for _, h := range r.at(path) {
		if h.status/100 == 2 && !slices.Contains(out, h.eventID) {
			out = append(out, h.eventID)
		}
	}
	return out
}

func TestKillNineMidWebhookDelivery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test builds and kills a real agentbus process; skipped with -short")
	}
	natsURL := testkit.NATSServer(t)
	cfgFile := filepath.Join(t.TempDir(), "agentbus.yaml")
	cfg := `{"webhooks":{"allowPrivate":true,"retrySchedule":["200ms","200ms","200ms","200ms","200ms"]}}`
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &target{bin: testkit.BuildAgentbus(t), base: "http://" + testkit.FreeAddr(t)}
	// Its own data directory, kept across the restart as a replica's disk
	// is: with an external NATS it holds the read models (<data>/index).
	g.data = t.TempDir()
	g.args = []string{"serve", "--listen", g.base[len("http://"):], "--nats-url", natsURL, "--config", cfgFile, "--data", g.data}
	rcv := newWHReceiver(t)
	rcv.run.Store(1)
	p := g.start(t, 1)

	paths := []string{"/a", "/b", "/c"}
	subs := map[string]string{}
	for _, path := range paths {
		body, _ := json.Marshal(map[string]any{"webhook": map[string]any{"url": rcv.url + path}, "filter": map[string]any{"types": []string{"OrderPlaced"}}})
		status, answer, err := postBody(g.base, "/subscriptions", body)
		if err != nil || status != http.StatusCreated {
			t.Fatalf("create the subscription to %s: %d %s %v", path, status, answer, err)
		}
		var rec struct{ ID string }
		_ = json.Unmarshal(answer, &rec)
		subs[path] = rec.ID
	}
	for i := range whEvents {
		if status, id, err := submit(g.base, placeOrder(fmt.Sprintf("wh-crash-%d", i))); err != nil || status != http.StatusAccepted {
			t.Fatalf("submit %d: %d %s %v", i, status, id, err)
		}
	}

	var heldID string
	select {
	case heldID = <-rcv.held:
	case <-time.After(60 * time.Second):
		t.Fatalf("the %dth event never reached /a; it got %d deliveries", whHeldAt, len(rcv.at("/a")))
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.Wait()
	rcv.run.Store(2)
	before := map[string]int{}
	for _, path := range paths {
		before[path] = len(rcv.delivered(path))
	}
	t.Logf("SIGKILL with /a's delivery of %s in flight; delivered before the kill: %v", heldID, before)
	client.Transport.(*http.Transport).CloseIdleConnections()

	restarted := time.Now()
	g.start(t, 2)
	// The killed replica's leases hold until they expire (15 s), then
	// the new one takes its subscriptions over from their cursors.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var short []string
		for _, path := range paths {
			if n := len(rcv.delivered(path)); n < whEvents {
				short = append(short, fmt.Sprintf("%s %d of %d", path, n, whEvents))
			}
		}
		if len(short) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("90 s after the restart, events delivered: %v", short)
		}
	}
	t.Logf("every event delivered %v after the restart", time.Since(restarted).Round(100*time.Millisecond))
	time.Sleep(500 * time.Millisecond) // a repeat would come by now

	var want []string // the OrderPlaced events, in log order
	for _, e := range allEvents(t, g.base) {
		if e.Type == "OrderPlaced" {
			want = append(want, e.ID)
		}
	}
	if len(want) != whEvents {
		t.Fatalf("%d OrderPlaced events in the log, want %d", len(want), whEvents)
	}
	for _, path := range paths {
		hits := rcv.at(path)
		var arrived []string // in order of first arrival
		answered := map[string]int{}
		for _, h := range hits {
			if h.id != h.eventID {
				t.Errorf("%s: webhook-id %s on event %s", path, h.id, h.eventID)
			}
			if !slices.Contains(arrived, h.eventID) {
				arrived = append(arrived, h.eventID)
			}
			if h.status/100 == 2 {
				answered[h.eventID]++
			}
		}
		if !slices.Equal(arrived, want) {
			t.Errorf("%s: events arrived first in the order %v, want %v", path, arrived, want)
		}
		if got := rcv.delivered(path); !slices.Equal(got, want) {
			t.Errorf("%s: events answered 2xx first in the order %v, want %v", path, got, want)
		}
		// A subscription has one delivery in flight at a time: the kill
		// can have cut one, whose answer agentbus never recorded.
		var twice []string
		for id, n := range answered {
			if n > 1 {
				twice = append(twice, id)
			}
		}
		if len(twice) > 1 {
			t.Errorf("%s: %d events answered 2xx more than once (%v), want at most the one in flight at the kill", path, len(twice), twice)
		}
		t.Logf("%s: %d attempts, %d events, repeated after the restart: %v", path, len(hits), len(want), twice)
	}
	// The delivery the kill cut came again, from the new run, with the
	// same webhook-id.
	var again bool
	for _, h := range rcv.at("/a") {
		again = again || (h.eventID == heldID && h.run == 2 && h.status == http.StatusOK && h.id == heldID)
	}
	if !again {
		t.Errorf("the delivery of %s cut by the kill was not made again after the restart", heldID)
	}
	for path, id := range subs {
		res, err := client.Get(g.base + "/subscriptions/" + id)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct{ Status string }
		_ = json.NewDecoder(res.Body).Decode(&rec)
		res.Body.Close()
		if rec.Status != "active" {
			t.Errorf("subscription %s (%s) is %q after the restart, want active", id, path, rec.Status)
		}
	}
}
