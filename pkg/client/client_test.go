package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/client"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/pkg/webhook/send"
	"github.com/agentbus/agentbus/test/testkit"
)

// shared returns a client of the agentbus TestMain started.
func shared(t *testing.T) *client.Client {
	t.Helper()
	return newClient(t, client.Config{URL: os.Getenv("AGENTBUS_URL")})
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails t unless err is an *Error with code and status.
func wantCode(t *testing.T, err error, code string, status int) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v (%T), want the API error %s", err, err, code)
	}
	if e.Code != code || e.Status != status || e.Message == "" {
		t.Fatalf("got %d %s %q, want %d %s with a message", e.Status, e.Code, e.Message, status, code)
	}
	if !client.IsCode(err, code) {
		t.Fatalf("IsCode(%s) is false", code)
	}
	return e
}

func note(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"text": text})
	return b
}

func TestNewRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]client.Config{
		"relative URL":  {URL: "127.0.0.1:8080"},
		"ftp URL":       {URL: "ftp://127.0.0.1"},
		"URL query":     {URL: "http://127.0.0.1:8080/?a=b"},
		"tenant slash":  {Tenant: "a/b"},
		"key and token": {Key: "k", Token: "t"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := client.New(cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestURLUnderPrefixAndTenant(t *testing.T) {
	c := newClient(t, client.Config{URL: "https://bus.example.com/api/", Tenant: "acme"})
	if got, want := c.URL("/traces/a b"), "https://bus.example.com/api/acme/traces/a%20b"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if got, want := newClient(t, client.Config{}).URL("/events"), client.DefaultURL+"/events"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// TestSendCompletesEnvelope: Send fills in what the envelope needs, the
// version asked for is the one sent, the same id is the same command, and
// its trace names the id and source given.
func TestSendCompletesEnvelope(t *testing.T) {
	ctx, c := ctxFor(t), shared(t)
	cmd := client.Command{Type: "PlaceOrder", Version: "1.0", ID: "complete-1", Source: "client-tests",
		Data: json.RawMessage(`{"orderId":"ord-complete-1","customer":"ada","items":[{"sku":"tea","quantity":1}]}`)}
	env, err := c.Complete(ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if env.SpecVersion != "1.0" || env.DataSchema != "place-order/1.0" || env.DataContentType != "application/json" || env.Time == "" {
		t.Fatalf("envelope not complete: %+v", env)
	}
	acc, err := c.Send(ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Send(ctx, cmd)
	if err != nil || again.ID != acc.ID || acc.Status != "accepted" {
		t.Fatalf("sending again: %+v %v, first %+v", again, err, acc)
	}
	tr, err := c.Wait(ctx, acc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if tr.ID != acc.ID || tr.Command.ID != "complete-1" || tr.Command.Source != "client-tests" || tr.Status != client.StatusProcessed || tr.Err() != nil {
		t.Fatalf("trace: %s", tr.Raw)
	}
	if len(tr.Events) != 1 || tr.Events[0].Type != "OrderPlaced" {
		t.Fatalf("events: %s", tr.Raw)
	}
	// without a version, the newest: 2.0 needs a currency
	_, err = c.Send(ctx, client.Command{Type: "PlaceOrder", Data: json.RawMessage(`{"orderId":"ord-complete-2","customer":"ada","items":[{"sku":"tea","quantity":1}]}`)})
	e := wantCode(t, err, "VALIDATION_FAILED", http.StatusBadRequest)
	if v := e.Violations(); len(v) != 1 || v[0].Path != "$.data.currency" {
		t.Fatalf("violations: %+v", v)
	}
}

// counter counts the requests to each path.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.URL.Path]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// TestCatalogKept: sending commands reads the command catalogue once, not
// once a command; a type the kept copy lacks reads it again.
func TestCatalogKept(t *testing.T) {
	ctx := ctxFor(t)
	n := &counter{n: map[string]int{}}
	c := newClient(t, client.Config{URL: os.Getenv("AGENTBUS_URL"), HTTPClient: &http.Client{Transport: n}})
	for i := range 3 {
		if _, err := c.Send(ctx, client.Command{Type: "AddNote", Data: note(fmt.Sprint("kept ", i))}); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.n["/commands"]; got != 4 { // one catalogue read, three submissions
		t.Fatalf("%d requests to /commands, want 1 catalogue read and 3 submissions", got)
	}
	_, err := c.Send(ctx, client.Command{Type: "NoSuchCommand"})
	wantCode(t, err, "UNKNOWN_COMMAND_TYPE", http.StatusBadRequest)
	if got := n.n["/commands"]; got != 6 {
		t.Fatalf("%d requests to /commands, want the catalogue read again for a type it lacked", got)
	}
}

func TestSendRefusals(t *testing.T) {
	ctx, c := ctxFor(t), shared(t)
	_, err := c.Send(ctx, client.Command{Type: "NoSuchCommand"})
	wantCode(t, err, "UNKNOWN_COMMAND_TYPE", http.StatusBadRequest)
	_, err = c.Send(ctx, client.Command{Type: "AddNote", Data: json.RawMessage(`[1]`)})
	if err == nil || client.IsCode(err, "VALIDATION_FAILED") || !strings.Contains(err.Error(), "JSON object") {
		t.Fatalf("data not an object: %v", err)
	}
	_, err = c.SendEnvelope(ctx, []byte(`{"specversion":"1.0"`))
	wantCode(t, err, "MALFORMED_JSON", http.StatusBadRequest)
	_, err = c.Trace(ctx, "no-such-command")
	wantCode(t, err, "TRACE_NOT_FOUND", http.StatusNotFound)
}

// TestSendAndWaitRejected: a command that gets a rejection as its outcome
// is done, and its trace's Err carries the rejection's code.
func TestSendAndWaitRejected(t *testing.T) {
	ctx, c := ctxFor(t), shared(t)
	data := json.RawMessage(`{"orderId":"ord-twice","customer":"ada","items":[{"sku":"tea","quantity":1}],"currency":"EUR"}`)
	if _, err := c.SendAndWait(ctx, client.Command{Type: "PlaceOrder", Data: data}); err != nil {
		t.Fatal(err)
	}
	tr, err := c.SendAndWait(ctx, client.Command{Type: "PlaceOrder", Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Done() || tr.Status != client.StatusRejected {
		t.Fatalf("trace: %s", tr.Raw)
	}
	e := wantCode(t, tr.Err(), "AGGREGATE_ALREADY_EXISTS", 0)
	if !strings.Contains(string(e.Details), tr.ID) {
		t.Fatalf("details %s do not name the trace %s", e.Details, tr.ID)
	}
}

// TestEventsPages: Events pages the log with the filters given, and Next
// reads on.
func TestEventsPages(t *testing.T) {
	s := testkit.Agentbus(t, testkit.NoNATSPort)
	ctx, c := ctxFor(t), newClient(t, client.Config{URL: s.URL})
	var corrs []string
	for i := range 3 {
		tr, err := c.SendAndWait(ctx, client.Command{Type: "AddNote", Data: note(fmt.Sprint("note ", i))})
		if err != nil {
			t.Fatal(err)
		}
		corrs = append(corrs, tr.ID)
	}
	var got []string
	q := client.EventQuery{Types: []string{"NoteAdded"}, Limit: 1}
	for range 10 {
		p, err := c.Events(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) == 0 {
			break
		}
		if len(p.Events) != 1 || p.Next == "" {
			t.Fatalf("page: %+v", p)
		}
		got = append(got, string(p.Events[0].Data))
		q.After = p.Next
	}
	if want := []string{`{"text":"note 0"}`, `{"text":"note 1"}`, `{"text":"note 2"}`}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pages: %v, want %v", got, want)
	}
	p, err := c.Events(ctx, client.EventQuery{CorrelationID: corrs[1]})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != 1 || string(p.Events[0].Data) != `{"text":"note 1"}` {
		t.Fatalf("by correlation: %+v", p)
	}
	raw, _ := json.Marshal(p.Events[0])
	if !bytes.Equal(raw, p.Events[0].Raw) || !bytes.Contains(raw, []byte(`"type":"NoteAdded"`)) {
		t.Fatalf("an event marshals back as sent: %s", raw)
	}
	_, err = c.Events(ctx, client.EventQuery{After: "not-a-cursor"})
	if e := wantCode(t, err, "VALIDATION_FAILED", http.StatusBadRequest); len(e.Violations()) == 0 {
		t.Fatal("no violations")
	}
}

// cutter is a transport that ends the first live stream after its first
// event, as a dropped connection would, and records each stream
// request's Last-Event-ID.
type cutter struct {
	mu     sync.Mutex
	n      int
	resume []string
}

func (c *cutter) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.Header.Get("Accept") != "text/event-stream" {
		return res, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.resume = append(c.resume, r.Header.Get("Last-Event-ID"))
	if c.n == 1 {
		res.Body = &firstEventOnly{r: bufio.NewReader(res.Body), c: res.Body}
	}
	return res, nil
}

func (c *cutter) resumes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.resume...)
}

// firstEventOnly passes a stream's lines through up to the end of its
// first event, then ends.
type firstEventOnly struct {
	r    *bufio.Reader
	c    io.Closer
	seen bool
	done bool
	buf  []byte
}

func (f *firstEventOnly) Read(p []byte) (int, error) {
	for len(f.buf) == 0 {
		if f.done {
			return 0, io.EOF
		}
		line, err := f.r.ReadBytes('\n')
		if err != nil {
			return 0, err
		}
		if bytes.HasPrefix(line, []byte("data:")) {
			f.seen = true
		}
		if f.seen && len(bytes.TrimSpace(line)) == 0 {
			f.done = true
		}
		f.buf = line
	}
	n := copy(p, f.buf)
	f.buf = f.buf[n:]
	return n, nil
}

func (f *firstEventOnly) Close() error { return f.c.Close() }

// TestFollowResumes: a stream cut after its first event is opened again
// with Last-Event-ID, and the events come once each, in order: what was
// stored, then what is published while following.
func TestFollowResumes(t *testing.T) {
	s := testkit.Agentbus(t, testkit.NoNATSPort)
	ctx := ctxFor(t)
	tr := &cutter{}
	c := newClient(t, client.Config{URL: s.URL, HTTPClient: &http.Client{Transport: tr}})
	for i := range 3 {
		if _, err := c.SendAndWait(ctx, client.Command{Type: "AddNote", Data: note(fmt.Sprint("note ", i))}); err != nil {
			t.Fatal(err)
		}
	}
	var got []client.Event
	stop := errors.New("enough")
	err := c.Follow(ctx, client.EventQuery{Types: []string{"NoteAdded"}}, func(e client.Event) error {
		got = append(got, e)
		switch len(got) {
		case 3:
			if _, err := c.Send(ctx, client.Command{Type: "AddNote", Data: note("live")}); err != nil {
				return err
			}
		case 4:
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("Follow returned %v, not fn's error", err)
	}
	var texts []string
	for _, e := range got {
		texts = append(texts, string(e.Data))
		if e.Cursor == "" || len(e.Raw) == 0 {
			t.Fatalf("event without cursor or raw: %+v", e)
		}
	}
	if want := []string{`{"text":"note 0"}`, `{"text":"note 1"}`, `{"text":"note 2"}`, `{"text":"live"}`}; fmt.Sprint(texts) != fmt.Sprint(want) {
		t.Fatalf("followed %v, want %v", texts, want)
	}
	if r := tr.resumes(); len(r) != 2 || r[0] != "" || r[1] != got[0].Cursor {
		t.Fatalf("Last-Event-ID of each connection: %q, want \"\" then %q", r, got[0].Cursor)
	}
}

// TestFollowRefused: a refused stream ends Follow with the API's error, a
// first connection that cannot be made with its error, and an ended
// context with the context's.
func TestFollowRefused(t *testing.T) {
	ctx, c := ctxFor(t), shared(t)
	err := c.Follow(ctx, client.EventQuery{After: "not-a-cursor"}, func(client.Event) error { return nil })
	wantCode(t, err, "VALIDATION_FAILED", http.StatusBadRequest)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close() // nobody listens there now
	err = newClient(t, client.Config{URL: gone}).Follow(ctx, client.EventQuery{}, func(client.Event) error { return nil })
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Fatalf("following an agentbus that is not there: %v, want the connection's error", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = c.Follow(short, client.EventQuery{Types: []string{"NothingEverHappens"}}, func(client.Event) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's error", err)
	}
}

// TestFollowBadEvent: a streamed event that is not an envelope ends Follow
// with an error naming it; reconnecting would only read it again.
func TestFollowBadEvent(t *testing.T) {
	var conns int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "retry: 10\nid: 7\ndata: [1,2]\n\n")
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(ctxFor(t), 5*time.Second)
	defer cancel()
	err := newClient(t, client.Config{URL: srv.URL}).Follow(ctx, client.EventQuery{}, func(client.Event) error { return nil })
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"7" is not an envelope`) {
		t.Fatalf("following a stream with a bad event: %v, want the event's error", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != 1 {
		t.Fatalf("%d connections, want 1", conns)
	}
}

func TestAgentsAndServices(t *testing.T) {
	ctx, c := ctxFor(t), shared(t)
	a, err := c.RegisterAgent(ctx, client.AgentSpec{ID: "client-shipper", Name: "Shipping agent", Accepts: []string{"ShipOrder"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != "client-shipper" || a.Status != "active" || len(a.Raw) == 0 {
		t.Fatalf("registered: %+v", a)
	}
	_, err = c.RegisterAgent(ctx, client.AgentSpec{ID: "client-shipper", Name: "again"})
	wantCode(t, err, "AGENT_ALREADY_REGISTERED", http.StatusConflict)
	if err := c.PauseAgent(ctx, "client-shipper"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, c.PauseAgent(ctx, "client-shipper"), "AGENT_ALREADY_PAUSED", http.StatusConflict)
	if a, err := c.GetAgent(ctx, "client-shipper"); err != nil || a.Status != "paused" {
		t.Fatalf("after pause: %+v %v", a, err)
	}
	if err := c.ResumeAgent(ctx, "client-shipper"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, c.ResumeAgent(ctx, "client-shipper"), "AGENT_NOT_PAUSED", http.StatusConflict)
	page, err := c.ListAgents(ctx, client.Page{Limit: 100})
	if err != nil || len(page.Agents) == 0 {
		t.Fatalf("list: %+v %v", page, err)
	}
	if err := c.DeleteAgent(ctx, "client-shipper"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetAgent(ctx, "client-shipper")
	wantCode(t, err, "AGENT_NOT_FOUND", http.StatusNotFound)
	wantCode(t, c.DeleteAgent(ctx, "client-shipper"), "AGENT_NOT_FOUND", http.StatusNotFound)

	sv, err := c.RegisterService(ctx, client.ServiceSpec{ID: "client-billing", Name: "Billing", Accepts: []string{"ChargeCustomer"}})
	if err != nil || sv.ID != "client-billing" {
		t.Fatalf("register service: %+v %v", sv, err)
	}
	if got, err := c.GetService(ctx, "client-billing"); err != nil || got.Name != "Billing" {
		t.Fatalf("get service: %+v %v", got, err)
	}
	sp, err := c.ListServices(ctx, client.Page{})
	if err != nil || len(sp.Services) == 0 {
		t.Fatalf("list services: %+v %v", sp, err)
	}
	if err := c.DeleteService(ctx, "client-billing"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetService(ctx, "client-billing")
	wantCode(t, err, "SERVICE_NOT_FOUND", http.StatusNotFound)
}

// TestSubscriptions: a subscription is created, its record carrying no
// secret; SubscriptionSecret reads the secret agentbus generated, the one
// its deliveries are signed with; its deliveries show in the trace of a
// command whose event it got (each attempt with its status and latency)
// and name the event by cursor, which a replay takes; its secret is
// rotated (read back after) and its dead letters redelivered; it is
// disabled, enabled and deleted.
func TestSubscriptions(t *testing.T) {
	ctx, c := ctxFor(t), shared(t)
	var mu sync.Mutex
	var got []http.Header
	var bodies [][]byte
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r.Header.Clone()), append(bodies, b)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	body, _ := json.Marshal(map[string]any{"webhook": map[string]string{"url": recv.URL}, "filter": map[string]any{"types": []string{"NoteAdded"}}})
	sub, err := c.CreateSubscription(ctx, body)
	if err != nil {
		t.Fatal(err)
	}
	if sub.ID == "" || sub.Status != "active" || sub.Webhook.URL != recv.URL || bytes.Contains(sub.Raw, []byte("secret")) {
		t.Fatalf("created: %s", sub.Raw)
	}
	t.Cleanup(func() { _ = c.DeleteSubscription(context.Background(), sub.ID) })
	secret, err := c.SubscriptionSecret(ctx, sub.ID)
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret: %q %v", secret, err)
	}
	tr, err := c.SendAndWait(ctx, client.Command{Type: "AddNote", Data: note("for the receiver")})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the trace shows the delivery", func() bool {
		tr, err = c.Trace(ctx, tr.ID)
		return err == nil && len(tr.Deliveries) == 1 && tr.Deliveries[0].Status == "delivered"
	})
	d := tr.Deliveries[0]
	if d.SubscriptionID != sub.ID || d.Cursor == "" || len(d.Attempts) != 1 || d.Attempts[0].StatusCode != 204 || d.Attempts[0].At.IsZero() || d.Attempts[0].LatencyMs <= 0 {
		t.Fatalf("delivery: %+v", d)
	}
	mu.Lock()
	h, b := got[0], bodies[0]
	mu.Unlock()
	key, err := send.Key(secret)
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := strconv.ParseInt(h.Get("Webhook-Timestamp"), 10, 64)
	if want := send.Signature([][]byte{key}, h.Get("Webhook-Id"), time.Unix(ts, 0), b); h.Get("Webhook-Signature") != want {
		t.Fatalf("the delivery is signed %q, the secret read signs it %q", h.Get("Webhook-Signature"), want)
	}
	ds, err := c.Deliveries(ctx, sub.ID)
	if err != nil || len(ds) != 1 || ds[0].Cursor != d.Cursor {
		t.Fatalf("deliveries: %+v %v", ds, err)
	}
	rot, err := c.RotateSubscriptionSecret(ctx, sub.ID, "")
	if err != nil || rot.ID != sub.ID || rot.PreviousSecretValidUntil == "" {
		t.Fatalf("rotate: %+v %v", rot, err)
	}
	if now, err := c.SubscriptionSecret(ctx, sub.ID); err != nil || !strings.HasPrefix(now, "whsec_") || now == secret {
		t.Fatalf("secret after rotating: %q %v (was %q)", now, err, secret)
	}
	const chosen = "a-secret-the-receiver-chose-0123456789"
	if rot, err = c.RotateSubscriptionSecret(ctx, sub.ID, chosen); err != nil || rot.PreviousSecretValidUntil == "" {
		t.Fatalf("rotate to a given secret: %+v %v", rot, err)
	}
	if now, err := c.SubscriptionSecret(ctx, sub.ID); err != nil || now != chosen {
		t.Fatalf("secret after rotating to a given one: %q %v", now, err)
	}
	_, err = c.RotateSubscriptionSecret(ctx, sub.ID, "short")
	wantCode(t, err, "VALIDATION_FAILED", http.StatusBadRequest)
	_, err = c.SubscriptionSecret(ctx, "no-such-subscription")
	wantCode(t, err, "SUBSCRIPTION_NOT_FOUND", http.StatusNotFound)
	if rd, err := c.RedeliverSubscription(ctx, sub.ID); err != nil || rd.ID != sub.ID || rd.DeadLetters != 0 {
		t.Fatalf("redeliver: %+v %v", rd, err)
	}
	if rp, err := c.ReplaySubscription(ctx, sub.ID, client.ReplayFrom{After: "0"}); err != nil || rp.After != "0" {
		t.Fatalf("replay after 0: %+v %v", rp, err)
	}
	if rp, err := c.ReplaySubscription(ctx, sub.ID, client.ReplayFrom{After: d.Cursor}); err != nil || rp.After != d.Cursor {
		t.Fatalf("replay after the delivery's cursor %s: %+v %v", d.Cursor, rp, err)
	}
	if rp, err := c.ReplaySubscription(ctx, sub.ID, client.ReplayFrom{Since: time.Now()}); err != nil || rp.After == "" {
		t.Fatalf("replay since now: %+v %v", rp, err)
	}
	_, err = c.ReplaySubscription(ctx, sub.ID, client.ReplayFrom{After: "5"})
	wantCode(t, err, "VALIDATION_FAILED", http.StatusBadRequest)
	_, err = c.ReplaySubscription(ctx, "no-such-subscription", client.ReplayFrom{After: "0"})
	wantCode(t, err, "SUBSCRIPTION_NOT_FOUND", http.StatusNotFound)
	if err := c.DisableSubscription(ctx, sub.ID, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetSubscription(ctx, sub.ID); err != nil || got.Status != "disabled" || got.StatusReason != "maintenance" || bytes.Contains(got.Raw, []byte("secret")) {
		t.Fatalf("disabled: %+v %v", got, err)
	}
	wantCode(t, c.DisableSubscription(ctx, sub.ID, "again"), "CONFLICT", 0)
	if err := c.EnableSubscription(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, c.EnableSubscription(ctx, sub.ID), "SUBSCRIPTION_ALREADY_ACTIVE", http.StatusConflict)
	if p, err := c.ListSubscriptions(ctx, client.Page{}); err != nil || len(p.Subscriptions) == 0 {
		t.Fatalf("list: %+v %v", p, err)
	}
	if err := c.DeleteSubscription(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetSubscription(ctx, sub.ID)
	wantCode(t, err, "SUBSCRIPTION_NOT_FOUND", http.StatusNotFound)
	_, err = c.SubscriptionSecret(ctx, sub.ID)
	wantCode(t, err, "SUBSCRIPTION_NOT_FOUND", http.StatusNotFound)
	_, err = c.CreateSubscription(ctx, json.RawMessage(`{"webhook":{"url":"ftp://x"}}`))
	wantCode(t, err, "WEBHOOK_URL_REJECTED", http.StatusBadRequest)
}

const signingKey = "client-tests-token-signing-key-0123456789"

// TestCredentials: with authentication on, no credential is refused with
// UNAUTHENTICATED, a read-only key writing or reading a subscription's
// secret (the write scope's) with FORBIDDEN, and a key or a
// token from /oauth/token is let in, whether agentbus reads keys from the
// Authorization header or from X-API-Key.
func TestCredentials(t *testing.T) {
	for _, method := range []string{"bearer", "apikey-header"} {
		t.Run(method, func(t *testing.T) {
			s := testkit.Agentbus(t, testkit.NoNATSPort, func(c *settings.Config) {
				c.Auth.Type, c.Auth.TokenSigningKey, c.Limits.Rate = method, signingKey, settings.Rate{}
			})
			ctx := ctxFor(t)
			_, err := newClient(t, client.Config{URL: s.URL}).Events(ctx, client.EventQuery{})
			wantCode(t, err, "UNAUTHENTICATED", http.StatusUnauthorized)
			keys, _ := testkit.Keys(t, s)
			key, rec, err := keys.Create(ctx, auth.NewKeyRequest{Tenants: []string{"default"}, Scopes: []auth.Scope{auth.ScopeRead, auth.ScopeWrite}})
			if err != nil {
				t.Fatal(err)
			}
			c := newClient(t, client.Config{URL: s.URL, Key: key})
			if _, err := c.SendAndWait(ctx, client.Command{Type: "AddNote", Data: note("with a key")}); err != nil {
				t.Fatal(err)
			}
			ro := newClient(t, client.Config{URL: s.URL, Key: testkit.Key(t, s, []string{"default"}, auth.ScopeRead)})
			if _, err := ro.Events(ctx, client.EventQuery{}); err != nil {
				t.Fatal(err)
			}
			_, err = ro.Send(ctx, client.Command{Type: "AddNote", Data: note("read only")})
			wantCode(t, err, "FORBIDDEN", http.StatusForbidden)
			_, err = ro.SubscriptionSecret(ctx, "any-subscription")
			wantCode(t, err, "FORBIDDEN", http.StatusForbidden)
			if method != "bearer" {
				return
			}
			req, _ := http.NewRequest(http.MethodPost, s.URL+"/oauth/token", strings.NewReader("grant_type=client_credentials"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.SetBasicAuth(rec.ID, key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var tok struct {
				AccessToken string `json:"access_token"`
			}
			if err := json.NewDecoder(res.Body).Decode(&tok); err != nil || tok.AccessToken == "" {
				t.Fatalf("no token: %d %v", res.StatusCode, err)
			}
			if _, err := newClient(t, client.Config{URL: s.URL, Token: tok.AccessToken}).Events(ctx, client.EventQuery{}); err != nil {
				t.Fatal(err)
			}
			_, err = newClient(t, client.Config{URL: s.URL, Token: "not-a-token"}).Events(ctx, client.EventQuery{})
			wantCode(t, err, "UNAUTHENTICATED", http.StatusUnauthorized)
		})
	}
}

// TestTenant: in multi-tenant mode a client with a tenant reaches that
// tenant's routes; one without gets the API's ROUTE_NOT_FOUND.
func TestTenant(t *testing.T) {
	s := testkit.Agentbus(t, testkit.NoNATSPort, func(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"acme", "globex"} })
	ctx := ctxFor(t)
	acme := newClient(t, client.Config{URL: s.URL, Tenant: "acme"})
	tr, err := acme.SendAndWait(ctx, client.Command{Type: "AddNote", Data: note("acme's")})
	if err != nil || tr.Status != client.StatusProcessed {
		t.Fatalf("%+v %v", tr, err)
	}
	if p, err := newClient(t, client.Config{URL: s.URL, Tenant: "globex"}).Events(ctx, client.EventQuery{}); err != nil || len(p.Events) != 0 {
		t.Fatalf("globex sees %+v %v", p, err)
	}
	_, err = newClient(t, client.Config{URL: s.URL}).Events(ctx, client.EventQuery{})
	wantCode(t, err, "ROUTE_NOT_FOUND", http.StatusNotFound)
}

// TestQueuedChangesWait: when agentbus answers a registry write 202 (its
// outcome took longer than registry.waitTimeout), the client waits on the
// trace: a processed registration or subscription reads the record back,
// a processed rotation reads until when the previous secret signs from
// its event, a rejected change comes back as the rejection's code.
func TestQueuedChangesWait(t *testing.T) {
	var mu sync.Mutex
	polls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /agents", "POST /agents/a1/pause":
			w.WriteHeader(http.StatusAccepted)
			corr := "corr-register"
			if strings.HasSuffix(r.URL.Path, "/pause") {
				corr = "corr-pause"
			}
			fmt.Fprintf(w, `{"id":%q,"status":"accepted"}`, corr)
		case "GET /traces/corr-register":
			mu.Lock()
			polls++
			status := "processing"
			if polls > 2 {
				status = "processed"
			}
			mu.Unlock()
			fmt.Fprintf(w, `{"id":"corr-register","command":{"type":"RegisterAgent"},"status":%q,"events":[],"deliveries":[],"updatedAt":"2026-01-01T00:00:00Z"}`, status)
		case "GET /traces/corr-pause":
			_, _ = io.WriteString(w, `{"id":"corr-pause","command":{"type":"PauseAgent"},"status":"rejected","rejection":{"code":"AGENT_ALREADY_PAUSED","message":"agent \"a1\" is already paused"},"events":[],"deliveries":[],"updatedAt":"2026-01-01T00:00:00Z"}`)
		case "GET /agents/a1":
			_, _ = io.WriteString(w, `{"id":"a1","name":"A","status":"active"}`)
		case "POST /subscriptions":
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"id":"corr-sub","status":"accepted"}`)
		case "GET /traces/corr-sub":
			_, _ = io.WriteString(w, `{"id":"corr-sub","command":{"type":"CreateSubscription"},"status":"processed","events":[],"deliveries":[],"updatedAt":"2026-01-01T00:00:00Z"}`)
		case "GET /subscriptions/corr-sub":
			_, _ = io.WriteString(w, `{"id":"corr-sub","webhook":{"url":"https://hooks.example.com/q"},"status":"active"}`)
		case "POST /subscriptions/s1/secret":
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"id":"corr-rot","status":"accepted"}`)
		case "GET /traces/corr-rot":
			_, _ = io.WriteString(w, `{"id":"corr-rot","command":{"type":"RotateSubscriptionSecret"},"status":"processed","events":[`+
				`{"specversion":"1.0","id":"e1","source":"agentbus","type":"SubscriptionSecretRotated","time":"2026-01-01T00:00:00Z",`+
				`"data":{"id":"s1","at":"2026-01-01T00:00:00Z","status":"active","previousSecretValidUntil":"2026-01-01T00:10:00Z"}}],"deliveries":[],"updatedAt":"2026-01-01T00:00:00Z"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"ROUTE_NOT_FOUND","message":"no route","details":{}}}`)
		}
	}))
	defer srv.Close()
	ctx, c := ctxFor(t), newClient(t, client.Config{URL: srv.URL})
	a, err := c.RegisterAgent(ctx, client.AgentSpec{ID: "a1", Name: "A"})
	if err != nil || a.ID != "a1" || a.Status != "active" || polls != 3 {
		t.Fatalf("queued registration: %+v %v after %d trace reads", a, err, polls)
	}
	sub, err := c.CreateSubscription(ctx, json.RawMessage(`{"webhook":{"url":"https://hooks.example.com/q"}}`))
	if err != nil || sub.ID != "corr-sub" || sub.Webhook.URL != "https://hooks.example.com/q" {
		t.Fatalf("queued subscription: %+v %v", sub, err)
	}
	rot, err := c.RotateSubscriptionSecret(ctx, "s1", "")
	if err != nil || rot.ID != "s1" || rot.PreviousSecretValidUntil != "2026-01-01T00:10:00Z" {
		t.Fatalf("queued rotation: %+v %v", rot, err)
	}
	e := wantCode(t, c.PauseAgent(ctx, "a1"), "AGENT_ALREADY_PAUSED", 0)
	if !strings.Contains(string(e.Details), "corr-pause") {
		t.Fatalf("details %s do not name the trace", e.Details)
	}
}

// TestWaitAsksAgainWhenBusy: a trace read agentbus answers 429 or 503 is
// asked again, not returned; another refusal is returned at once.
func TestWaitAsksAgainWhenBusy(t *testing.T) {
	var mu sync.Mutex
	reads := 0
	var at []time.Time // of each read of c
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		reads++
		n := reads
		at = append(at, time.Now())
		mu.Unlock()
		switch {
		case r.URL.Path == "/traces/gone":
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"TRACE_NOT_FOUND","message":"no trace","details":{}}}`)
		case n == 1:
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"code":"RATE_LIMITED","message":"too many reads","details":{"retryAfterSeconds":1}}}`)
		case n == 2:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":"SERVICE_UNAVAILABLE","message":"NATS is not reachable","details":{}}}`)
		default:
			_, _ = io.WriteString(w, `{"id":"c","command":{"type":"PlaceOrder"},"status":"processed","events":[],"deliveries":[],"updatedAt":"2026-01-01T00:00:00Z"}`)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(client.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := c.Wait(ctx, "c")
	if err != nil || !tr.Done() {
		t.Fatalf("Wait: %v, %+v", err, tr)
	}
	if reads != 3 {
		t.Errorf("%d reads, want 3 (two busy answers, then the outcome)", reads)
	} else if gap := at[1].Sub(at[0]); gap < time.Second {
		t.Errorf("asked again %v after an answer saying retryAfterSeconds 1", gap)
	}
	var ae *client.Error
	if _, err := c.Wait(ctx, "gone"); !errors.As(err, &ae) || ae.Code != "TRACE_NOT_FOUND" {
		t.Errorf("Wait on a missing trace: %v, want TRACE_NOT_FOUND at once", err)
	}
}
