package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
)

// push is one entry of a trace's pushes.
type push struct {
	Transport, EventID, EventType, Listener string
	At                                      time.Time
}

// tracePushes reads the pushes of a trace (GET url) with cred ("" for
// none).
func tracePushes(t *testing.T, url, cred string) []push {
	t.Helper()
	var r *response
	if cred == "" {
		r = get(t, url)
	} else {
		r = auCall(t, "bearer", http.MethodGet, url, cred, nil)
	}
	if r.Status != 200 {
		t.Fatalf("GET %s: %d %s", url, r.Status, r.Body)
	}
	var tr struct {
		Pushes *[]push `json:"pushes"`
	}
	if err := json.Unmarshal(r.Body, &tr); err != nil || tr.Pushes == nil {
		t.Fatalf("GET %s: no pushes array (%v): %s", url, err, r.Body)
	}
	return *tr.Pushes
}

// byTransport returns the pushes of event id, by transport.
func byTransport(ps []push, id string) map[string]push {
	out := map[string]push{}
	for _, p := range ps {
		if p.EventID == id {
			out[p.Transport] = p
		}
	}
	return out
}

// a2aJSONRPC returns an A2A client of base's JSON-RPC binding.
func a2aJSONRPC(ctx context.Context, t *testing.T, base string) *a2aclient.Client {
	t.Helper()
	card, err := agentcard.NewResolver(http.DefaultClient).Resolve(ctx, base)
	if err != nil {
		t.Fatalf("resolve the agent card: %v", err)
	}
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == a2a.TransportProtocolJSONRPC && i.ProtocolVersion == a2a.Version {
			c, err := a2aclient.NewFromEndpoints(ctx, []*a2a.AgentInterface{i}, a2aclient.WithJSONRPCTransport(http.DefaultClient))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatalf("no JSON-RPC interface on the card: %+v", card.SupportedInterfaces)
	return nil
}

// TestTracePushesOfEveryTransportAndReplica: a command's event pushed by
// one replica to an SSE stream, to the MCP session that sent the command
// and to an A2A task stream of it is listed in the command's trace once
// per transport, after the event reached each listener, with the event's
// id and type and a label that is not the MCP session's id — read on the
// replica that pushed, and on another replica on the same NATS, which
// processed the command and pushed nothing.
func TestTracePushesOfEveryTransportAndReplica(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	on := func(c *settings.Config) {
		c.NATS.URL = natsURL
		c.Catalog.Dirs = []string{"../../config/catalog"}
	}
	// The front replica processes nothing: the command waits until the
	// listeners are there, and the back replica processes it.
	front := start(t, on, func(c *settings.Config) { c.Processor.Disabled = true })
	// Room for the two busyWaits of the traces below and the calls around
	// them.
	ctx, cancel := context.WithTimeout(context.Background(), 3*busyWait)
	defer cancel()

	sse := openStream(t, front.URL+"/events?type=OrderPlaced")

	var mu sync.Mutex
	var mcpGot []map[string]any
	client := sdk.NewClient(&sdk.Implementation{Name: "push-test", Version: "1"}, &sdk.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
			raw, _ := json.Marshal(r.Params.Data)
			var ev map[string]any
			_ = json.Unmarshal(raw, &ev)
			mu.Lock()
			mcpGot = append(mcpGot, ev)
			mu.Unlock()
		},
	})
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: front.URL + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "place_order",
		Arguments: map[string]any{"orderId": "o-pushed", "customer": "ada", "items": []any{map[string]any{"sku": "A-1", "quantity": 1}}, "currency": "EUR"}})
	if err != nil || res.IsError {
		t.Fatalf("place_order over MCP: %v %+v", err, res)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var sent struct{ ID string }
	if err := json.Unmarshal(raw, &sent); err != nil || sent.ID == "" {
		t.Fatalf("place_order answered %s", raw)
	}
	corr := sent.ID

	// An A2A task stream of the command, watching once its task came.
	a2aDone := make(chan []a2a.Event, 1)
	watching := make(chan struct{})
	go func() {
		var got []a2a.Event
		for ev, err := range a2aJSONRPC(ctx, t, front.URL).SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: a2a.TaskID(corr)}) {
			if err != nil {
				break
			}
			if len(got) == 0 {
				close(watching)
			}
			got = append(got, ev)
		}
		a2aDone <- got
	}()
	select {
	case <-watching:
	case <-ctx.Done():
		t.Fatal("the A2A task stream did not start")
	}
	if ps := tracePushes(t, front.URL+"/traces/"+corr, ""); len(ps) != 0 {
		t.Fatalf("pushes before the command was processed: %+v", ps)
	}

	back := start(t, on) // processes the command
	evID := sse.next(t, 1)[0].Data["id"].(string)
	testkit.Eventually(t, "the event pushed to the MCP session", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(mcpGot) > 0 && mcpGot[0]["id"] == evID
	})
	var artifacts int
	for _, ev := range <-a2aDone {
		if _, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok {
			artifacts++
		}
	}
	if artifacts != 1 {
		t.Fatalf("the A2A task stream got %d artifacts, want the event", artifacts)
	}

	for _, s := range []*server.Server{front, back} {
		var got map[string]push
		testkit.EventuallyWithin(t, "a push per transport in the trace read on "+s.URL, busyWait, func() bool {
			got = byTransport(tracePushes(t, s.URL+"/traces/"+corr, ""), evID)
			return len(got) == 3
		})
		for tr, label := range map[string]string{"sse": "anonymous", "mcp": "session ", "a2a": "anonymous"} {
			p := got[tr]
			if p.EventType != "OrderPlaced" || !strings.HasPrefix(p.Listener, label) || p.At.IsZero() {
				t.Errorf("%s push read on %s: %+v, want OrderPlaced to %q…", tr, s.URL, p, label)
			}
		}
		if id := cs.ID(); id == "" || strings.Contains(got["mcp"].Listener, id) {
			t.Errorf("the MCP push names the session by its id %q: %q", id, got["mcp"].Listener)
		}
	}
	// MCP's getTrace tool answers the same trace, pushes and all.
	tr, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "getTrace", Arguments: map[string]any{"id": corr}})
	if err != nil || tr.IsError {
		t.Fatalf("getTrace over MCP: %v %+v", err, tr)
	}
	raw, _ = json.Marshal(tr.StructuredContent)
	var viaMCP struct{ Pushes []push }
	if err := json.Unmarshal(raw, &viaMCP); err != nil || len(byTransport(viaMCP.Pushes, evID)) != 3 {
		t.Errorf("getTrace over MCP lists pushes %+v (%v)", viaMCP.Pushes, err)
	}
	ps := tracePushes(t, back.URL+"/traces/"+corr, "")
	for i := 1; i < len(ps); i++ {
		if ps[i].At.Before(ps[i-1].At) {
			t.Fatalf("pushes not by time: %+v", ps)
		}
	}
}

// TestTracePushesStayInTheirTenant: each tenant's trace lists the push of
// its command's event to its own stream, named by its own key, and none of
// the other tenant's; another tenant's command is not found.
func TestTracePushesStayInTheirTenant(t *testing.T) {
	t.Parallel()
	s, keyA, keyB := tnSetup(t)
	bearer := func(k string) []string { return []string{"Authorization", "Bearer " + k} }
	stA := openStream(t, s.URL+"/a/events", bearer(keyA)...)
	stB := openStream(t, s.URL+"/b/events", bearer(keyB)...)
	corrA := postAs(t, s.URL+"/a/commands", keyA, placeOrder("iso-a"))
	corrB := postAs(t, s.URL+"/b/commands", keyB, placeOrder("iso-b"))
	evA, evB := stA.next(t, 1)[0].Data["id"].(string), stB.next(t, 1)[0].Data["id"].(string)
	for _, tc := range []struct {
		tenant, key, corr, event, other string
	}{{"a", keyA, corrA, evA, evB}, {"b", keyB, corrB, evB, evA}} {
		var ps []push
		testkit.Eventually(t, "tenant "+tc.tenant+"'s push in its trace", func() bool {
			ps = tracePushes(t, fmt.Sprintf("%s/%s/traces/%s", s.URL, tc.tenant, tc.corr), tc.key)
			return len(ps) > 0
		})
		time.Sleep(200 * time.Millisecond) // a batch of the other tenant's would be in by now
		ps = tracePushes(t, fmt.Sprintf("%s/%s/traces/%s", s.URL, tc.tenant, tc.corr), tc.key)
		if len(ps) != 1 || ps[0].EventID != tc.event || ps[0].Transport != "sse" || !strings.HasPrefix(ps[0].Listener, "key ") {
			t.Fatalf("tenant %s's trace lists %+v, want one SSE push of %s", tc.tenant, ps, tc.event)
		}
	}
	var otherA, otherB []push
	otherA = tracePushes(t, s.URL+"/a/traces/"+corrA, keyA)
	otherB = tracePushes(t, s.URL+"/b/traces/"+corrB, keyB)
	if otherA[0].Listener == otherB[0].Listener {
		t.Errorf("the two tenants' streams carry one label: %q", otherA[0].Listener)
	}
	if r := auCall(t, "bearer", http.MethodGet, s.URL+"/b/traces/"+corrA, keyB, nil); r.Status != 404 {
		t.Errorf("tenant a's command read as b's: %d %s", r.Status, r.Body)
	}
}

// pushedThrough waits until the events published asynchronously are
// stored, reads n of them from st, closes it, and returns the pushes of
// command corr once the trace lists n.
func pushedThrough(t *testing.T, s *server.Server, st *sseStream, corr string, n int) []push {
	t.Helper()
	select {
	case <-s.Conn.JS.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("the events not stored")
	}
	st.next(t, n)
	st.close()
	var ps []push
	testkit.EventuallyWithin(t, "every event's push in the trace", busyWait, func() bool {
		ps = tracePushes(t, s.URL+"/traces/"+corr, "")
		return len(ps) >= n
	})
	return ps
}

// TestTracePushesOfEventsReadFromTheLog: a stream that falls behind reads
// what it missed from the log, and the events stored after it opened are
// listed as pushed whichever way they came; the events a stream replays
// from before it opened are a read, not pushes.
func TestTracePushesOfEventsReadFromTheLog(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *settings.Config) { c.Push.Queue = 1 }) // behind at the second event at once
	publish := func(corr, id string) {
		t.Helper()
		m := nats.NewMsg("agentbus.evt.default._._.LogSeeded")
		m.Data = plEvent(id, "LogSeeded", nil)
		m.Header.Set("Nats-Msg-Id", id)
		m.Header.Set("Agentbus-Correlation-Id", corr)
		if _, err := s.Conn.JS.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	publish("replayed", "replayed-0")
	eventsOf(t, s.URL, "replayed", 1)
	st := openStream(t, s.URL+"/events?type=LogSeeded&after=0")
	st.next(t, 1) // the replay
	const corr, n = "read-from-the-log", 20
	for i := range n {
		publish(corr, fmt.Sprintf("logged-%d", i))
	}
	ps := pushedThrough(t, s, st, corr, n)
	for i := range n {
		id := fmt.Sprintf("logged-%d", i)
		if p, ok := byTransport(ps, id)["sse"]; !ok || p.EventType != "LogSeeded" {
			t.Errorf("event %s: no SSE push in %+v", id, ps)
		}
	}
	if ps := tracePushes(t, s.URL+"/traces/replayed", ""); len(ps) != 0 {
		t.Errorf("a replayed event listed as pushed: %+v", ps)
	}
}

// TestTracePushesOfEventsThatComeTogether: events of one command stored
// at once reach an SSE stream together, in one write or a few, and each is
// listed as pushed — those held back for the write of the next too — and
// an event not pushed (the stream is closed) is not.
func TestTracePushesOfEventsThatComeTogether(t *testing.T) {
	t.Parallel()
	s := start(t)
	st := openStream(t, s.URL+"/events?type=BatchSeeded")
	const corr, n = "held-together", 30 // within the 32 a command keeps
	var ids []string
	for i := range n {
		id := fmt.Sprintf("held-%d", i)
		ids = append(ids, id)
		m := nats.NewMsg("agentbus.evt.default._._.BatchSeeded")
		m.Data = plEvent(id, "BatchSeeded", map[string]any{"n": i})
		m.Header.Set("Nats-Msg-Id", id)
		m.Header.Set("Agentbus-Correlation-Id", corr)
		if _, err := s.Conn.JS.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	ps := pushedThrough(t, s, st, corr, n)
	for _, id := range ids {
		if p, ok := byTransport(ps, id)["sse"]; !ok || p.EventType != "BatchSeeded" {
			t.Errorf("event %s: no SSE push in %+v", id, ps)
		}
	}
	if len(ps) != n {
		t.Errorf("%d pushes of %d events", len(ps), n)
	}
	// One more event after the stream closed: not pushed.
	m := nats.NewMsg("agentbus.evt.default._._.BatchSeeded")
	m.Data = plEvent("held-after", "BatchSeeded", nil)
	m.Header.Set("Nats-Msg-Id", "held-after")
	m.Header.Set("Agentbus-Correlation-Id", corr)
	if _, err := s.Conn.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	eventsOf(t, s.URL, corr, n+1)
	time.Sleep(200 * time.Millisecond)
	if got := tracePushes(t, s.URL+"/traces/"+corr, ""); len(got) != n {
		t.Errorf("after the stream closed: %d pushes, want %d", len(got), n)
	}
}
