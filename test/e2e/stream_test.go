package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// sseEvent is one event of a live stream: its SSE id and its data.
type sseEvent struct {
	ID   string
	Data map[string]any
}

// sseStream is an open live stream read line by line.
type sseStream struct {
	res      *http.Response
	cancel   context.CancelFunc
	events   chan sseEvent
	comments chan string
	done     chan struct{}
}

// openStream opens url as Server-Sent Events with hdr (name, value pairs)
// and fails t unless it answers 200 text/event-stream.
func openStream(t *testing.T, rawURL string, hdr ...string) *sseStream {
	t.Helper()
	st, res := tryStream(t, rawURL, hdr...)
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		st.close()
		t.Fatalf("stream %s: %d %s", rawURL, res.StatusCode, res.Header.Get("Content-Type"))
	}
	t.Cleanup(st.close)
	return st
}

// tryStream sends the stream request and starts reading whatever answers.
func tryStream(t *testing.T, rawURL string, hdr ...string) (*sseStream, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("stream %s: %v", rawURL, err)
	}
	st := &sseStream{res: res, cancel: cancel, events: make(chan sseEvent, 100000), comments: make(chan string, 1000), done: make(chan struct{})}
	go st.read()
	return st, res
}

func (st *sseStream) read() {
	defer close(st.done)
	sc := bufio.NewScanner(st.res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var id, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data != "" {
				var m map[string]any
				_ = json.Unmarshal([]byte(data), &m)
				st.events <- sseEvent{ID: id, Data: m}
			}
			id, data = "", ""
		case strings.HasPrefix(line, ":"):
			select {
			case st.comments <- strings.TrimSpace(line[1:]):
			default:
			}
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
}

func (st *sseStream) close() {
	st.cancel()
	st.res.Body.Close()
	<-st.done
}

// next returns the next n events, failing t if they do not come.
func (st *sseStream) next(t *testing.T, n int) []sseEvent {
	t.Helper()
	out := make([]sseEvent, 0, n)
	deadline := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case ev := <-st.events:
			out = append(out, ev)
		case <-st.done:
			t.Fatalf("the stream ended after %d of %d events", len(out), n)
		case <-deadline:
			t.Fatalf("%d of %d events came", len(out), n)
		}
	}
	return out
}

// ids returns the envelope ids of events.
func ids(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i], _ = e.Data["id"].(string)
	}
	return out
}

// checkCursors fails t unless every event's SSE id is a cursor of the
// default tenant's events, past the one before.
func checkCursors(t *testing.T, s *server.Server, evs []sseEvent) {
	t.Helper()
	var last uint64
	for _, e := range evs {
		n, err := s.Ops.Reader().CursorSeq(envelope.DefaultTenant, false, e.ID)
		if err != nil || n <= last {
			t.Fatalf("SSE id %q after %d: not a growing cursor (%v)", e.ID, last, err)
		}
		last = n
	}
}

var seeded atomic.Int64

// seed appends events of types straight to the event stream, each with an
// id of its own, in the order given, and returns their ids.
func seed(t *testing.T, s *server.Server, types []string) []string {
	t.Helper()
	out := make([]string, len(types))
	for i, typ := range types {
		out[i] = fmt.Sprintf("ev-%d", seeded.Add(1))
		m := nats.NewMsg("agentbus.evt.default._._." + typ)
		m.Data = plEvent(out[i], typ, map[string]any{"n": i})
		m.Header.Set("Nats-Msg-Id", out[i])
		if _, err := s.Conn.JS.PublishMsg(context.Background(), m); err != nil {
			t.Fatalf("seed %s: %v", out[i], err)
		}
	}
	return out
}

// allIDs pages GET /events (with query) and returns the envelope ids.
func allIDs(t *testing.T, s *server.Server, query string) []string {
	t.Helper()
	q, _ := url.ParseQuery(query)
	return plIDs(plWalk(t, s, q, 1000))
}

// TestStreamFollowsTheLog: a stream sends the events stored before it
// opened, then each event as it is published, in stream order, each with
// its cursor as SSE id; the events are exactly those GET /events pages.
func TestStreamFollowsTheLog(t *testing.T) {
	t.Parallel()
	s := start(t)
	before := seed(t, s, []string{"A", "B", "A"})
	st := openStream(t, s.URL+"/events?after=0")
	got := st.next(t, 3)
	if !slices.Equal(ids(got), before) {
		t.Fatalf("catch-up %v, want %v", ids(got), before)
	}
	after := seed(t, s, []string{"B", "C", "A", "A"})
	got = append(got, st.next(t, 4)...)
	checkCursors(t, s, got)
	if want := append(before, after...); !slices.Equal(ids(got), want) || !slices.Equal(ids(got), allIDs(t, s, "")) {
		t.Fatalf("stream %v, want %v", ids(got), want)
	}
	// The cursor of the last event is the page cursor that follows it.
	var page plPage = plList(t, s, "/events?after="+got[len(got)-1].ID)
	if len(page.Events) != 0 {
		t.Fatalf("events after the last SSE id: %v", page.Events)
	}
	// A filtered stream from a cursor.
	ft := openStream(t, s.URL+"/events?type=A&after="+got[0].ID)
	want := allIDs(t, s, "type=A&after="+got[0].ID)
	if f := ft.next(t, len(want)); !slices.Equal(ids(f), want) {
		t.Fatalf("type=A stream %v, want %v", ids(f), want)
	}
	live := seed(t, s, []string{"B", "A"})
	if f := ft.next(t, 1); ids(f)[0] != live[1] {
		t.Fatalf("type=A stream went on with %v, want %s", ids(f), live[1])
	}
}

// TestStreamStartsAtTheLogsEnd: without after (or Last-Event-ID) a stream
// sends new events only, from the log's end; after=0 replays the log from
// its start.
func TestStreamStartsAtTheLogsEnd(t *testing.T) {
	t.Parallel()
	s := start(t)
	before := seed(t, s, []string{"A", "B", "A"})
	live := openStream(t, s.URL+"/events")
	replay := openStream(t, s.URL+"/events?after=0")
	after := seed(t, s, []string{"C", "A"})
	if got := ids(live.next(t, 2)); !slices.Equal(got, after) {
		t.Fatalf("a stream without after sent %v first, want the new %v (stored before: %v)", got, after, before)
	}
	if got := ids(replay.next(t, 5)); !slices.Equal(got, append(before, after...)) {
		t.Fatalf("a stream from after=0 sent %v, want %v", got, append(before, after...))
	}
}

// TestStreamResumesWithLastEventID: while events keep being published, a
// client that drops its stream and reconnects with Last-Event-ID gets every
// event once: no gap, no repeat.
func TestStreamResumesWithLastEventID(t *testing.T) {
	t.Parallel()
	s := start(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a steady flow of events
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			id := fmt.Sprintf("tick-%d", i)
			m := nats.NewMsg("agentbus.evt.default._._.Tick")
			m.Data = plEvent(id, "Tick", map[string]any{"n": i})
			m.Header.Set("Nats-Msg-Id", id)
			if _, err := s.Conn.JS.PublishMsg(context.Background(), m); err != nil {
				t.Errorf("publish %s: %v", id, err)
				return
			}
		}
	}()
	var got []sseEvent
	last := ""
	for round := range 5 {
		var st *sseStream
		if last == "" {
			st = openStream(t, s.URL+"/events?after=0")
		} else {
			st = openStream(t, s.URL+"/events", "Last-Event-ID", last)
		}
		evs := st.next(t, 20+round*7)
		st.close()
		got = append(got, evs...)
		last = evs[len(evs)-1].ID
	}
	close(stop)
	wg.Wait()
	checkCursors(t, s, got)
	all := allIDs(t, s, "")
	if n := len(got); !slices.Equal(ids(got), all[:n]) {
		t.Fatalf("the resumed streams gave %d events that are not the log's first %d", n, n)
	}
}

// TestStreamSlowReaderCatchesUp: a reader slower than the events (a queue
// of one event) falls behind, reads the log, and still gets every event in
// order, once.
func TestStreamSlowReaderCatchesUp(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *settings.Config) { c.Push.Queue = 1 })
	st := openStream(t, s.URL+"/events?type=Slow")
	var want []string
	for range 10 {
		types := make([]string, 50)
		for i := range types {
			types[i] = "Slow"
			if i%5 == 0 {
				types[i] = "Other"
			}
		}
		for i, id := range seed(t, s, types) {
			if types[i] == "Slow" {
				want = append(want, id)
			}
		}
	}
	got := st.next(t, len(want))
	checkCursors(t, s, got)
	if !slices.Equal(ids(got), want) {
		t.Fatalf("a slow reader got %d events, not the %d published in order", len(got), len(want))
	}
}

// TestStreamCorrelationAndHeartbeat: a stream of one command's events sends
// them as the processor publishes them, and heartbeats while silent.
func TestStreamCorrelationAndHeartbeat(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *settings.Config) {
		c.Catalog.Dirs = []string{"../../config/catalog"}
		c.Push.Heartbeat = settings.Duration(100 * time.Millisecond)
	})
	env := placeOrder("o-1")
	corr := submitCommand(t, s.URL, env)
	// Opened at once: the event may be stored before its receipt lists it.
	st := openStream(t, s.URL+"/events?after=0&correlationId="+corr)
	got := st.next(t, 1)
	want := eventsOf(t, s.URL, corr, 1)
	if got[0].Data["id"] != want[0]["id"] {
		t.Fatalf("correlation stream %v, want %v", got[0].Data, want[0])
	}
	other := submitCommand(t, s.URL, placeOrder("o-2"))
	eventsOf(t, s.URL, other, 1)
	deadline := time.After(10 * time.Second)
	beats := 0
	for beats < 2 {
		select {
		case ev := <-st.events:
			t.Fatalf("another command's event on a correlation stream: %v", ev.Data)
		case c := <-st.comments:
			if c == "heartbeat" {
				beats++
			}
		case <-deadline:
			t.Fatal("no heartbeats on a silent stream")
		}
	}
}

// TestStreamRefusals: bad filters are refused as GET /events refuses
// them, before any stream opens; streams past the bound are refused 429.
func TestStreamRefusals(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *settings.Config) { c.Push.Streams, c.Push.StreamsPerCredential = 1, 1 })
	for name, q := range map[string]string{
		"bad type":   "type=lower",
		"bad cursor": "after=x",
		"synthetic":  "synthetic=true",
		"catalog":    "view=catalog&type=A",
		"unknown":    "foo=1",
	} {
		res := do(t, "GET", s.URL+"/events?"+q, "", nil, "Accept", "text/event-stream")
		if res.Status != 400 || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") || res.errorCode(t) != "VALIDATION_FAILED" {
			t.Errorf("%s: %d %s %s", name, res.Status, res.Header.Get("Content-Type"), res.Body)
		}
	}
	// A Last-Event-ID no stream sent is refused under its own name.
	if res := do(t, "GET", s.URL+"/events", "", nil, "Accept", "text/event-stream", "Last-Event-ID", "nope"); res.Status != 400 ||
		res.errorCode(t) != "VALIDATION_FAILED" || !strings.Contains(string(res.Body), `"path":"Last-Event-ID"`) {
		t.Errorf("a bad Last-Event-ID: %d %s", res.Status, res.Body)
	}
	openStream(t, s.URL+"/events")
	st, res := tryStream(t, s.URL+"/events")
	defer st.close()
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("a stream past push.streams: %d (Retry-After %q)", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// Without Accept: text/event-stream, GET /events is a page as ever.
	if r := get(t, s.URL+"/events"); r.Status != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /events: %d %s", r.Status, r.Header.Get("Content-Type"))
	}
}

// TestStreamEndsAtShutdown: a graceful stop ends open streams at once,
// saying why, rather than waiting for them.
func TestStreamEndsAtShutdown(t *testing.T) {
	t.Parallel()
	s := testkit.Agentbus(t, testkit.NoNATSPort)
	st := openStream(t, s.URL+"/events")
	seed(t, s, []string{"A"})
	st.next(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop with an open stream: %v", err)
	}
	select {
	case <-st.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream outlived the server")
	}
	saw := false
	for len(st.comments) > 0 {
		if c := <-st.comments; strings.HasPrefix(c, "closed:") {
			saw = true
		}
	}
	if !saw {
		t.Fatal("the stream ended without saying why")
	}
}

// TestStreamTenantIsolation: a tenant's stream carries that tenant's
// events only, and another tenant's credential cannot open it.
func TestStreamTenantIsolation(t *testing.T) {
	t.Parallel()
	s, keyA, keyB := tnSetup(t)
	bearer := func(k string) []string { return []string{"Authorization", "Bearer " + k} }
	stA := openStream(t, s.URL+"/a/events", bearer(keyA)...)
	stB := openStream(t, s.URL+"/b/events", bearer(keyB)...)
	for i := range 3 {
		postAs(t, s.URL+"/a/commands", keyA, placeOrder(fmt.Sprintf("a-%d", i)))
		postAs(t, s.URL+"/b/commands", keyB, placeOrder(fmt.Sprintf("b-%d", i)))
	}
	check := func(name string, st *sseStream, own string) {
		for _, e := range st.next(t, 3) {
			if id, _ := e.Data["data"].(map[string]any)["orderId"].(string); !strings.HasPrefix(id, own) {
				t.Fatalf("%s's stream carries %v", name, e.Data)
			}
		}
	}
	check("a", stA, "a-")
	check("b", stB, "b-")
	// a's key on b's stream, and no key at all.
	for name, hdr := range map[string][]string{"a's key": bearer(keyA), "no key": nil} {
		st, res := tryStream(t, s.URL+"/b/events", hdr...)
		st.close()
		if res.StatusCode != 403 && res.StatusCode != 401 {
			t.Fatalf("%s on b's stream: %d", name, res.StatusCode)
		}
	}
	readOnly, _ := auMint(t, auKeys(t, s), "a", auth.ScopeRead)
	openStream(t, s.URL+"/a/events", bearer(readOnly)...)
}

// TestStreamOnEveryReplicaAndThroughANATSRestart: two agentbus replicas on
// one NATS server; a stream opened on one carries the events of commands
// the other took, and keeps every event, once and in order, while the
// NATS server restarts under it.
func TestStreamOnEveryReplicaAndThroughANATSRestart(t *testing.T) {
	t.Parallel()
	port := testkit.FreePort(t)
	store := t.TempDir()
	runNATS := func() *natsserver.Server {
		ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: store, NoLog: true, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server not ready")
		}
		return ns
	}
	ns := runNATS()
	t.Cleanup(func() { ns.Shutdown() })
	on := func(c *settings.Config) {
		c.NATS.URL = ns.ClientURL()
		c.Catalog.Dirs = []string{"../../config/catalog"}
	}
	s1, s2 := start(t, on), start(t, on)
	st := openStream(t, s2.URL+"/events?type=OrderPlaced")
	var want []string
	order := func(s *server.Server, id string) {
		corr := submitCommand(t, s.URL, placeOrder(id))
		want = append(want, eventsOf(t, s.URL, corr, 1)[0]["id"].(string))
	}
	order(s1, "r-1")
	order(s2, "r-2")
	got := st.next(t, 2)
	ns.Shutdown()
	ns.WaitForShutdown()
	ns = runNATS()
	testkit.Eventually(t, "agentbus reconnected", func() bool {
		code, _, _ := tryJSON("POST", s1.URL+"/commands", placeOrder("r-probe"))
		return code == 202
	})
	order(s1, "r-3")
	got = append(got, st.next(t, 2)...) // r-probe and r-3
	checkCursors(t, s1, got)            // s2 sent them: the replicas share the cursor key
	// The probe and r-3 are orders of their own: either may be processed
	// first after the restart (the probe may have been redelivered).
	seen := ids(got)
	if seen[0] != want[0] || seen[1] != want[1] || !slices.Contains(seen[2:], want[2]) || seen[2] == seen[3] {
		t.Fatalf("the stream on the other replica gave %v, want %v and the probe's event after the restart", seen, want)
	}
}

// TestStreamEndsWhenItsKeyIsRevoked: a stream opened with an API key ends,
// saying why, once the key is revoked, at its next check (push.recheck);
// another key's stream goes on.
func TestStreamEndsWhenItsKeyIsRevoked(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer", func(c *settings.Config) { c.Push.Recheck = settings.Duration(200 * time.Millisecond) })
	keys := auKeys(t, s)
	doomed, doomedID := auMint(t, keys, "default", auth.ScopeRead)
	kept, _ := auMint(t, keys, "default", auth.ScopeRead)
	stDoomed := openStream(t, s.URL+"/events", "Authorization", "Bearer "+doomed)
	stKept := openStream(t, s.URL+"/events", "Authorization", "Bearer "+kept)
	if _, err := keys.Revoke(context.Background(), doomedID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stDoomed.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked key's stream goes on")
	}
	saw := false
	for len(stDoomed.comments) > 0 {
		if c := <-stDoomed.comments; strings.HasPrefix(c, "closed: UNAUTHENTICATED") {
			saw = true
		}
	}
	if !saw {
		t.Fatal("the stream ended without saying why")
	}
	ids := seed(t, s, []string{"After"})
	if got := stKept.next(t, 1); got[0].Data["id"] != ids[0] {
		t.Fatalf("the other key's stream: %v", got)
	}
}
