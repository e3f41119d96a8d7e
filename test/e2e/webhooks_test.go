package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/pkg/webhook/send"
	"github.com/agentbus/agentbus/test/testkit"
)

// whFast is a short retry schedule: two retries 50 ms apart.
func whFast(c *settings.Config) {
	suLoopback(c)
	c.Webhooks.RetrySchedule = []settings.Duration{settings.Duration(50 * time.Millisecond), settings.Duration(50 * time.Millisecond)}
}

// whHit is one request a receiver got.
type whHit struct {
	id, ts, sig string
	body        []byte
	status      int
}

// whReceiver is a loopback webhook receiver whose answer the test sets.
type whReceiver struct {
	url    string
	mu     sync.Mutex
	hits   []whHit
	answer int // default 204
}

func newWHReceiver(t *testing.T) *whReceiver {
	r := &whReceiver{answer: http.StatusNoContent}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		status := r.answer
		r.hits = append(r.hits, whHit{id: req.Header.Get("webhook-id"), ts: req.Header.Get("webhook-timestamp"),
			sig: req.Header.Get("webhook-signature"), body: body, status: status})
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/hook"
	return r
}

func (r *whReceiver) setAnswer(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = status
}

// delivered returns the webhook-ids answered 2xx, in order.
func (r *whReceiver) delivered() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, h := range r.hits {
		if h.status < 300 {
			out = append(out, h.id)
		}
	}
	return out
}

func (r *whReceiver) all() []whHit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.hits)
}

// whEventID returns the id of the one event of command corr.
func whEventID(t *testing.T, base, corr string) (string, []byte) {
	t.Helper()
	evs := eventsOf(t, base, corr, 1)
	raw, _ := json.Marshal(evs[0])
	return evs[0]["id"].(string), raw
}

func whStatus(t *testing.T, base, id string) string {
	t.Helper()
	r := get(t, base+"/subscriptions/"+id)
	if r.Status != 200 {
		t.Fatalf("GET subscription: %d %s", r.Status, r.Body)
	}
	s, _ := r.JSON(t)["status"].(string)
	return s
}

// TestWebhookDelivery: a subscription gets its events, signed with its
// secret (the one GET /subscriptions/{id}/secret shows), in order, bodies exactly the envelopes
// GET /events shows; each delivery is in the command's trace and the
// subscription's list.
func TestWebhookDelivery(t *testing.T) {
	t.Parallel()
	s := start(t, whFast)
	rcv := newWHReceiver(t)
	rec := suCreated(t, "create", postJSON(t, s.URL+"/subscriptions", suBody(rcv.url, []string{"OrderPlaced"}, nil)))
	id := rec["id"].(string)
	secret := suSecret(t, s.URL, id)
	key, err := send.Key(secret)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	var corrs []string
	for _, o := range []string{"o-w1", "o-w2", "o-w3"} {
		corr := submitCommand(t, s.URL, placeOrder(o))
		eid, _ := whEventID(t, s.URL, corr)
		ids, corrs = append(ids, eid), append(corrs, corr)
	}
	testkit.Eventually(t, "three deliveries", func() bool { return len(rcv.delivered()) >= 3 })
	if got := rcv.delivered(); !slices.Equal(got, ids) {
		t.Fatalf("delivered %v, want %v in order", got, ids)
	}
	for i, h := range rcv.all() {
		ts, _ := strconv.ParseInt(h.ts, 10, 64)
		if want := send.Signature([][]byte{key}, h.id, time.Unix(ts, 0), h.body); h.sig != want {
			t.Fatalf("delivery %d: signature %q, want %q", i, h.sig, want)
		}
		var got, want map[string]any
		_ = json.Unmarshal(h.body, &got)
		want = eventsOf(t, s.URL, corrs[i], 1)[0]
		if g, _ := json.Marshal(got); string(g) != string(mustMarshal(t, want)) {
			t.Fatalf("delivery %d body %s, want the event %s", i, h.body, mustMarshal(t, want))
		}
	}
	trace := get(t, s.URL+"/traces/"+corrs[0]).JSON(t)
	ds, _ := trace["deliveries"].([]any)
	if len(ds) != 1 || ds[0].(map[string]any)["status"] != "delivered" || ds[0].(map[string]any)["subscriptionId"] != id {
		t.Fatalf("trace deliveries %v", trace["deliveries"])
	}
	list := get(t, s.URL+"/subscriptions/"+id+"/deliveries")
	var recs struct {
		Deliveries []map[string]any `json:"deliveries"`
	}
	if err := json.Unmarshal(list.Body, &recs); err != nil || len(recs.Deliveries) != 3 {
		t.Fatalf("listDeliveries: %s", list.Body)
	}
	// No sequence of the shared logs is shown: a record names its event's
	// place by the cursor GET /events gives, and replay takes it.
	page := plList(t, s, "/events?type=OrderPlaced&limit=1")
	if recs.Deliveries[0]["cursor"] != page.Next || strings.Contains(string(list.Body), "eventSeq") {
		t.Fatalf("the first record's cursor is not the one GET /events gives (%q): %s", page.Next, list.Body)
	}
	raw := get(t, s.URL+"/traces/"+corrs[0]).Body
	if strings.Contains(string(raw), `"sequence"`) || strings.Contains(string(raw), "eventSeq") {
		t.Fatalf("the trace shows a sequence: %s", raw)
	}
	before := len(rcv.delivered())
	r := postJSON(t, s.URL+"/subscriptions/"+id+"/replay", map[string]any{"after": page.Next})
	if r.Status != 202 || r.JSON(t)["after"] != page.Next {
		t.Fatalf("replay after the first record's cursor: %d %s", r.Status, r.Body)
	}
	testkit.Eventually(t, "the replay", func() bool { return len(rcv.delivered()) >= before+2 })
	if again := rcv.delivered()[before:]; !slices.Equal(again[:2], ids[1:]) {
		t.Fatalf("replayed %v, want %v", again, ids[1:])
	}
	for _, after := range []any{2, "2", "", nil, page.Next + "A"} {
		r := postJSON(t, s.URL+"/subscriptions/"+id+"/replay", map[string]any{"after": after})
		if e := plError(t, r, 400, "VALIDATION_FAILED"); !slices.Equal(e.paths(), []string{"$.after"}) {
			t.Fatalf("replay after %v: %s", after, r.Body)
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWebhookFailuresAndRecovery: a receiver that keeps failing gets the
// event dead-lettered and the subscription marked failing, and the next
// event comes; once it answers, the subscription is active again and the
// dead letter can be redelivered. 410 Gone disables the subscription, and
// enabling it delivers from the refused event on.
func TestWebhookFailuresAndRecovery(t *testing.T) {
	t.Parallel()
	s := start(t, whFast, func(c *settings.Config) { c.Events.AllowInjection = true })
	rcv := newWHReceiver(t)
	id := suCreated(t, "create", postJSON(t, s.URL+"/subscriptions", suBody(rcv.url, []string{"OrderPlaced"}, nil)))["id"].(string)

	rcv.setAnswer(http.StatusInternalServerError)
	first, _ := whEventID(t, s.URL, submitCommand(t, s.URL, placeOrder("o-f1")))
	testkit.Eventually(t, "the subscription failing", func() bool { return whStatus(t, s.URL, id) == "failing" })
	if n := len(rcv.all()); n != 3 {
		t.Fatalf("%d attempts, want 3 (the schedule's two retries)", n)
	}
	failing := plList(t, s, "/events?type=SubscriptionFailing")
	if len(failing.Events) != 1 || failing.Events[0]["data"].(map[string]any)["eventSeq"] != nil {
		t.Fatalf("SubscriptionFailing: want one, naming no sequence of the log: %v", failing.Events)
	}
	rcv.setAnswer(http.StatusOK)
	second, _ := whEventID(t, s.URL, submitCommand(t, s.URL, placeOrder("o-f2")))
	testkit.Eventually(t, "the next event", func() bool { return slices.Contains(rcv.delivered(), second) })
	testkit.Eventually(t, "the subscription active again", func() bool { return whStatus(t, s.URL, id) == "active" })
	r := postJSON(t, s.URL+"/subscriptions/"+id+"/redeliver", nil)
	if r.Status != 202 || r.JSON(t)["deadLetters"].(float64) != 1 {
		t.Fatalf("redeliver: %d %s", r.Status, r.Body)
	}
	testkit.Eventually(t, "the dead letter delivered", func() bool { return slices.Contains(rcv.delivered(), first) })

	rcv.setAnswer(http.StatusGone)
	third, _ := whEventID(t, s.URL, submitCommand(t, s.URL, placeOrder("o-f3")))
	testkit.Eventually(t, "the subscription disabled", func() bool { return whStatus(t, s.URL, id) == "disabled" })
	fourth, _ := whEventID(t, s.URL, submitCommand(t, s.URL, placeOrder("o-f4")))
	rcv.setAnswer(http.StatusOK)
	if r := postJSON(t, s.URL+"/subscriptions/"+id+"/enable", nil); r.Status != 204 {
		t.Fatalf("enable: %d %s", r.Status, r.Body)
	}
	testkit.Eventually(t, "both events after the enable", func() bool {
		d := rcv.delivered()
		return slices.Contains(d, third) && slices.Contains(d, fourth)
	})
	d := rcv.delivered()
	if slices.Index(d, third) > slices.Index(d, fourth) {
		t.Fatalf("delivered out of order: %v", d)
	}

	// Replay from the first event: every event delivered again, in order.
	before := len(rcv.delivered())
	if r := postJSON(t, s.URL+"/subscriptions/"+id+"/replay", map[string]any{"after": 0}); r.Status != 202 {
		t.Fatalf("replay: %d %s", r.Status, r.Body)
	}
	testkit.Eventually(t, "the replay", func() bool { return len(rcv.delivered()) >= before+4 })
	replayed := rcv.delivered()[before:]
	if !slices.Equal(replayed[:4], []string{first, second, third, fourth}) {
		t.Fatalf("replayed %v", replayed)
	}
	// Injected (synthetic) events are never delivered.
	inj := plEvent("syn-1", "OrderPlaced", map[string]any{"orderId": "x"})
	if r := do(t, http.MethodPost, s.URL+"/events", "application/json", inj); r.Status != 202 {
		t.Fatalf("inject: %d %s", r.Status, r.Body)
	}
	time.Sleep(500 * time.Millisecond)
	if slices.Contains(rcv.delivered(), "syn-1") {
		t.Fatal("an injected event was delivered")
	}
}

// TestWebhookReplicasDeliverOnce: two agentbus instances on one NATS
// deliver each event to each subscription once.
func TestWebhookReplicasDeliverOnce(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	on := func(c *settings.Config) { whFast(c); c.NATS.URL = natsURL }
	a := start(t, on)
	b := start(t, on)
	var rcvs []*whReceiver
	for range 3 {
		rcv := newWHReceiver(t)
		suCreated(t, "create", postJSON(t, a.URL+"/subscriptions", suBody(rcv.url, []string{"OrderPlaced"}, nil)))
		rcvs = append(rcvs, rcv)
	}
	var ids []string
	for i := range 10 {
		srv := []*server.Server{a, b}[i%2]
		eid, _ := whEventID(t, srv.URL, submitCommand(t, srv.URL, placeOrder("o-r"+strconv.Itoa(i))))
		ids = append(ids, eid)
	}
	for i, rcv := range rcvs {
		testkit.Eventually(t, "every event", func() bool { return len(rcv.delivered()) >= len(ids) })
		time.Sleep(300 * time.Millisecond)
		if got := rcv.delivered(); !slices.Equal(got, ids) {
			t.Errorf("receiver %d got %d deliveries %v, want each of %d once in order", i, len(got), got, len(ids))
		}
	}
}

// TestWebhookFailingDoesNotFeedItself: a subscription without a filter
// whose receiver always fails is not sent the events about its own
// delivery state (the SubscriptionFailing its dead letters cause, its
// SubscriptionDisabled and SubscriptionEnabled): its attempts stay those
// of the commands' events, each tried as often as the schedule says,
// however long it is left failing; disabled and enabled, it goes on past
// its own two events to the next. Another subscription of the tenant is
// sent them.
func TestWebhookFailingDoesNotFeedItself(t *testing.T) {
	t.Parallel()
	s := start(t, whFast)
	watcher := newWHReceiver(t)
	suCreated(t, "create the watcher", postJSON(t, s.URL+"/subscriptions", suBody(watcher.url, nil, nil)))
	rcv := newWHReceiver(t)
	rcv.setAnswer(http.StatusInternalServerError)
	id := suCreated(t, "create", postJSON(t, s.URL+"/subscriptions", suBody(rcv.url, nil, nil)))["id"].(string)

	var want []string
	for _, o := range []string{"o-loop1", "o-loop2", "o-loop3"} {
		eid, _ := whEventID(t, s.URL, submitCommand(t, s.URL, placeOrder(o)))
		want = append(want, eid)
	}
	const perEvent = 3 // the first attempt and the schedule's two retries
	testkit.Eventually(t, "every event dead-lettered", func() bool {
		return len(rcv.all()) >= len(want)*perEvent && whStatus(t, s.URL, id) == "failing"
	})
	// Twenty times the retry schedule: time enough for a loop to show.
	time.Sleep(2 * time.Second)
	tries, types := map[string]int{}, map[string]int{}
	for _, h := range rcv.all() {
		tries[h.id]++
		var ev struct{ Type string }
		_ = json.Unmarshal(h.body, &ev)
		types[ev.Type]++
	}
	for _, eid := range want {
		if tries[eid] != perEvent {
			t.Errorf("event %s tried %d times, want %d", eid, tries[eid], perEvent)
		}
	}
	if n := len(rcv.all()); n != len(want)*perEvent {
		t.Fatalf("%d attempts (by event type: %v) for %d events tried %d times each", n, types, len(want), perEvent)
	}

	// Disabled, then enabled: the subscription goes on past its own
	// SubscriptionDisabled and SubscriptionEnabled to the next event.
	rcv.setAnswer(http.StatusNoContent)
	submitCommand(t, s.URL, command("DisableSubscription", "disable-subscription/1.0", map[string]any{"id": id, "reason": "maintenance"}))
	testkit.Eventually(t, "the subscription disabled", func() bool { return whStatus(t, s.URL, id) == "disabled" })
	if r := postJSON(t, s.URL+"/subscriptions/"+id+"/enable", nil); r.Status != 204 {
		t.Fatalf("enable: %d %s", r.Status, r.Body)
	}
	next, _ := whEventID(t, s.URL, submitCommand(t, s.URL, placeOrder("o-loop4")))
	testkit.Eventually(t, "the next event", func() bool { return slices.Contains(rcv.delivered(), next) })
	for _, h := range rcv.all() {
		var ev struct{ Type string }
		if _ = json.Unmarshal(h.body, &ev); slices.Contains([]string{"SubscriptionFailing", "SubscriptionDisabled", "SubscriptionEnabled"}, ev.Type) {
			t.Errorf("the subscription was sent its own %s", ev.Type)
		}
	}
	// The watcher, another subscription, is sent the failing one's
	// SubscriptionFailing events.
	testkit.Eventually(t, "the watcher sent SubscriptionFailing", func() bool {
		for _, h := range watcher.all() {
			var ev struct{ Type string }
			if json.Unmarshal(h.body, &ev) == nil && ev.Type == "SubscriptionFailing" {
				return true
			}
		}
		return false
	})
}
