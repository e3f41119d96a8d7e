package e2e_test

import (
	"net/url"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
)

var plUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestSubmitAccepted(t *testing.T) {
	t.Parallel()
	s := start(t)
	env := placeOrder("o-accept")
	r := postJSON(t, s.URL+"/commands", env)
	if r.Status != 202 {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	body := r.JSON(t)
	id, _ := body["id"].(string)
	if !plUUID.MatchString(id) {
		t.Fatalf("id %q is not a UUID: %s", id, r.Body)
	}
	if want := envelope.CorrelationID("default", env["source"].(string), env["id"].(string)); id != want {
		t.Errorf("id %s, want the correlation id of (default, source, id) %s", id, want)
	}
	loc, err := url.Parse(r.Header.Get("Location"))
	if err != nil || loc.Path != "/traces/"+id {
		t.Errorf("Location %q, want the trace /traces/%s", r.Header.Get("Location"), id)
	}
	if loc.IsAbs() && loc.Scheme+"://"+loc.Host != s.URL {
		t.Errorf("Location %q is not on rest.endpoint %s", loc, s.URL)
	}
	if n := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; n != 1 {
		t.Fatalf("command stream holds %d messages, want 1", n)
	}
	evs := eventsOf(t, s.URL, id, 1)
	if evs[0]["type"] != "OrderPlaced" {
		t.Errorf("event %v", evs[0])
	}
}

// TestResubmitSameEnvelope retries one envelope, in sequence and at once:
// one id, one queued command, one set of events.
func TestResubmitSameEnvelope(t *testing.T) {
	t.Parallel()
	s := start(t)
	env := placeOrder("o-retry")
	first := submitCommand(t, s.URL, env)

	// At once, from many clients.
	var wg sync.WaitGroup
	ids := make([]string, 10)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, id, err := plTry(s, env)
			if err != nil || status != 202 {
				t.Errorf("retry %d: %d %v", i, status, err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	for i, id := range ids {
		if id != first {
			t.Errorf("retry %d: id %q, want %s", i, id, first)
		}
	}
	if n := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; n != 1 {
		t.Fatalf("command stream holds %d messages after retries, want 1", n)
	}
	eventsOf(t, s.URL, first, 1)
	testkit.WaitIdle(t, s.Conn.JS, testkit.PipelineConsumers()...)
	if got := testkit.AggregateMsgs(t, s.Conn.JS, plEvents, "default", "order", "o-retry"); got != 1 {
		t.Errorf("order o-retry has %d events, want 1", got)
	}

	// After it was processed (its receipt exists): still nothing new.
	if id := submitCommand(t, s.URL, env); id != first {
		t.Errorf("retry after processing: id %s, want %s", id, first)
	}
	testkit.WaitIdle(t, s.Conn.JS, testkit.PipelineConsumers()...)
	if n := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; n != 1 {
		t.Errorf("command stream holds %d messages, want 1", n)
	}
	if n := testkit.StreamState(t, s.Conn.JS, plEvents).Msgs; n != 1 {
		t.Errorf("event stream holds %d messages, want 1", n)
	}
	eventsOf(t, s.URL, first, 1)
}

// TestResubmitAfterDuplicateWindow retries an envelope once JetStream's
// duplicate window has passed: the receipt alone must keep the retry from
// queuing the command again.
func TestResubmitAfterDuplicateWindow(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *settings.Config) { c.Streams.DuplicateWindow = settings.Duration(time.Second) })
	env := placeOrder("o-late-retry")
	first := submitCommand(t, s.URL, env)
	eventsOf(t, s.URL, first, 1)

	// A probe proves the window is over: the same Nats-Msg-Id is stored again.
	probe := func() bool {
		m := nats.NewMsg("agentbus.cmd.default.WindowProbe")
		m.Header.Set("Nats-Msg-Id", "window-probe")
		m.Data = []byte(`{}`)
		ack, err := s.Conn.JS.PublishMsg(plCtx(t), m)
		if err != nil {
			t.Fatal(err)
		}
		return !ack.Duplicate
	}
	if !probe() {
		t.Fatal("first probe was a duplicate")
	}
	testkit.Eventually(t, "the duplicate window to pass", probe)
	testkit.WaitIdle(t, s.Conn.JS, testkit.PipelineConsumers()...)
	before := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs

	if id := submitCommand(t, s.URL, env); id != first {
		t.Errorf("late retry: id %s, want %s", id, first)
	}
	if n := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; n != before {
		t.Errorf("late retry queued the command again (%d → %d messages)", before, n)
	}
	testkit.WaitIdle(t, s.Conn.JS, testkit.PipelineConsumers()...)
	if got := testkit.SubjectMsgs(t, s.Conn.JS, plEvents, "agentbus.evt.default.>"); got != 1 {
		t.Errorf("%d events, want 1", got)
	}
}

func TestSameIDOtherSource(t *testing.T) {
	t.Parallel()
	s := start(t)
	a := placeOrder("o-src-a")
	b := placeOrder("o-src-b")
	b["id"] = a["id"]
	b["source"] = "another-sender"
	idA, idB := submitCommand(t, s.URL, a), submitCommand(t, s.URL, b)
	if idA == idB {
		t.Fatalf("same id from two sources got one correlation id %s", idA)
	}
	if n := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; n != 2 {
		t.Errorf("command stream holds %d messages, want 2", n)
	}
	evA, evB := eventsOf(t, s.URL, idA, 1), eventsOf(t, s.URL, idB, 1)
	if evA[0]["data"].(map[string]any)["orderId"] != "o-src-a" || evB[0]["data"].(map[string]any)["orderId"] != "o-src-b" {
		t.Errorf("events crossed: %v / %v", evA[0], evB[0])
	}
}
