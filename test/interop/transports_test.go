package interop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpSession opens an MCP session on endpoint with key as a bearer
// credential, with the official Go SDK's client.
func mcpSession(t *testing.T, endpoint, key string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "interop", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: bearerClient(key), MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("MCP connect %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// mcpCall calls a tool and returns its structured result and whether it is
// a tool error.
func mcpCall(t *testing.T, cs *sdk.ClientSession, name string, args any, meta sdk.Meta) (map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args, Meta: meta})
	if err != nil {
		t.Fatalf("MCP %s: %v", name, err)
	}
	var out map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("MCP %s: structured content %s: %v", name, raw, err)
	}
	return out, res.IsError
}

// restSubmit posts env to /commands and returns the status and the body.
func restSubmit(t *testing.T, base, key string, env any) (int, map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(env)
	status, _, body, err := testkit.Send(bearerClient(key), http.MethodPost, base+"/commands", "application/json", raw)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("POST /commands: %d %s", status, body)
	}
	return status, out
}

// TestOneTableThreeTransports: the same command over REST, MCP and A2A
// has the same correlation id (derived from the tenant, source and id:
// resubmitting it over another transport queues nothing), the same
// validation errors (the same error body, and nothing queued), and the same
// events; a typed command completed over MCP and over A2A with the same id
// is one command.
func TestOneTableThreeTransports(t *testing.T) {
	t.Parallel()
	s := a2aServer(t) // bearer, the bootstrap key: every scope
	key := a2aBootstrap
	cs := mcpSession(t, s.URL+"/mcp", key)
	a2c, _ := a2aClient(t, s.URL, key, a2a.TransportProtocolJSONRPC)
	ctx := context.Background()
	commands := func() uint64 { return testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs }

	// One envelope, three transports, one command.
	env := order("x-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	want := envelope.CorrelationID("default", env["source"].(string), env["id"].(string))
	status, body := restSubmit(t, s.URL, key, env)
	if status != http.StatusAccepted || body["id"] != want {
		t.Fatalf("REST: %d %v, want 202 with id %s", status, body, want)
	}
	before := commands()
	mcpRes, failed := mcpCall(t, cs, "submitCommand", map[string]any{"body": env}, nil)
	if failed || mcpRes["id"] != want {
		t.Fatalf("MCP submitCommand of the same envelope: %v, want id %s", mcpRes, want)
	}
	res, err := a2c.SendMessage(ctx, dataMessage(env))
	if err != nil {
		t.Fatalf("A2A: %v", err)
	}
	task, ok := res.(*a2a.Task)
	if !ok || string(task.ID) != want {
		t.Fatalf("A2A answered %T %v, want the task %s", res, res, want)
	}
	if after := commands(); after != before {
		t.Fatalf("resubmitting over MCP and A2A grew the command log from %d to %d", before, after)
	}
	task = awaitTerminal(t, a2c, task.ID)
	events := restEvents(t, s.URL, key, want)
	sameJSON(t, "A2A artifacts vs GET /events?correlationId=", artifactEnvelopes(t, task), events)
	story, failed := mcpCall(t, cs, "getTrace", map[string]any{"id": want}, nil)
	if failed {
		t.Fatalf("MCP getTrace: %v", story)
	}
	sameJSON(t, "MCP getTrace events vs GET /events?correlationId=", story["events"], events)

	// The same refusals, with the same error body, and nothing queued.
	bad := map[string]func(map[string]any){
		"data against its schema": func(e map[string]any) {
			e["data"] = map[string]any{"orderId": "b", "items": []any{map[string]any{"sku": "tea", "quantity": 0}}}
		},
		"unknown type":        func(e map[string]any) { e["type"] = "NoSuchCommand" },
		"unlisted version":    func(e map[string]any) { e["dataschema"] = "place-order/9.9" },
		"extra member":        func(e map[string]any) { e["extra"] = true },
		"missing data":        func(e map[string]any) { delete(e, "data") },
		"time not a datetime": func(e map[string]any) { e["time"] = "yesterday" },
		"another's source":    func(e map[string]any) { e["source"] = ops.CallerSource("someone-else") },
	}
	before = commands()
	for name, spoil := range bad {
		e := order("bad")
		spoil(e)
		status, restBody := restSubmit(t, s.URL, key, e)
		if status != http.StatusBadRequest {
			t.Fatalf("%s: REST %d %v", name, status, restBody)
		}
		mcpBody, failed := mcpCall(t, cs, "submitCommand", map[string]any{"body": e}, nil)
		if !failed {
			t.Fatalf("%s: MCP accepted it: %v", name, mcpBody)
		}
		sameJSON(t, name+": MCP tool error vs REST error body", mcpBody, restBody)
		_, err := a2c.SendMessage(ctx, dataMessage(e))
		var ae *a2a.Error
		if !errors.As(err, &ae) {
			t.Fatalf("%s: A2A: %v, want an error", name, err)
		}
		sameJSON(t, name+": A2A error details vs REST error body", ae.Details, restBody["error"])
	}
	if after := commands(); after != before {
		t.Fatalf("refused commands grew the command log from %d to %d", before, after)
	}

	// A typed command: the same id from the same caller over MCP and A2A
	// is one command, with the caller's source.
	data := map[string]any{"orderId": "typed-" + strconv.FormatInt(time.Now().UnixNano(), 36), "customer": "ada", "currency": "EUR",
		"items": []any{map[string]any{"sku": "tea", "quantity": 1}}}
	typed, failed := mcpCall(t, cs, "place_order", data, sdk.Meta{"agentbus/commandId": "typed-1"})
	if failed {
		t.Fatalf("MCP place_order: %v", typed)
	}
	before = commands()
	res, err = a2c.SendMessage(ctx, dataMessage(map[string]any{"skill": "PlaceOrder", "id": "typed-1", "data": data}))
	if err != nil {
		t.Fatalf("A2A typed skill: %v", err)
	}
	if wantTyped := envelope.CorrelationID("default", ops.CallerSource(auth.BootstrapID), "typed-1"); typed["id"] != wantTyped || string(res.(*a2a.Task).ID) != wantTyped {
		t.Fatalf("typed command ids: MCP %v, A2A %v, want %s", typed["id"], res.(*a2a.Task).ID, wantTyped)
	}
	if after := commands(); after != before {
		t.Fatalf("the typed command again over A2A grew the command log from %d to %d", before, after)
	}
}

// TestMCPPushFromAnotherReplica: two agentbus replicas on one NATS server,
// the first processing nothing; a command submitted in an MCP session on
// the first is processed by the second, and its event is pushed to the
// session all the same — each replica pushes to its own sessions what the
// event log holds.
func TestMCPPushFromAnotherReplica(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	on := func(c *settings.Config) { c.NATS.URL = natsURL }
	front := a2aServer(t, on, func(c *settings.Config) { c.Processor.Disabled = true })
	a2aServer(t, on) // processes
	var mu sync.Mutex
	var pushed []map[string]any
	c := sdk.NewClient(&sdk.Implementation{Name: "interop", Version: "1"}, &sdk.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
			raw, _ := json.Marshal(r.Params.Data)
			var ev map[string]any
			_ = json.Unmarshal(raw, &ev)
			mu.Lock()
			pushed = append(pushed, ev)
			mu.Unlock()
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: front.URL + "/mcp", HTTPClient: bearerClient(a2aBootstrap), MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	orderID := "rep-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	res, failed := mcpCall(t, cs, "place_order", map[string]any{"orderId": orderID, "customer": "ada", "currency": "EUR",
		"items": []any{map[string]any{"sku": "tea", "quantity": 1}}}, nil)
	if failed {
		t.Fatalf("place_order: %v", res)
	}
	testkit.Eventually(t, "the other replica's event pushed to the session", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range pushed {
			if ev["type"] == "OrderPlaced" && ev["data"].(map[string]any)["orderId"] == orderID {
				return true
			}
		}
		return false
	})
}

// TestDataRulesOnEveryTransport: data that the schema validator and a
// reader of the stored bytes could read apart — a member name twice at
// any depth, a number a float64 does not carry exactly — is refused with
// VALIDATION_FAILED at its path over REST, over MCP (submitCommand and a
// typed tool) and over A2A (a command envelope and a typed skill), and
// nothing is queued.
func TestDataRulesOnEveryTransport(t *testing.T) {
	t.Parallel()
	s := a2aServer(t)
	key := a2aBootstrap
	cs := mcpSession(t, s.URL+"/mcp", key)
	commands := func() uint64 { return testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs }
	before := commands()
	violations := func(what string, body map[string]any) []any {
		t.Helper()
		e, _ := body["error"].(map[string]any)
		if e == nil {
			e = body
		}
		if e["code"] != "VALIDATION_FAILED" {
			t.Fatalf("%s: %v, want VALIDATION_FAILED", what, body)
		}
		d, _ := e["details"].(map[string]any)
		v, _ := d["violations"].([]any)
		return v
	}
	hasPath := func(what string, v []any, path string) {
		t.Helper()
		for _, x := range v {
			if m, _ := x.(map[string]any); m["path"] == path {
				return
			}
		}
		t.Errorf("%s: violations %v, none at %s", what, v, path)
	}
	for name, items := range map[string]string{
		"a member twice":      `[{"sku":"tea","quantity":1,"quantity":0}]`,
		"45-digit integer":    `[{"sku":"tea","quantity":123456789012345678901234567890123456789012345}]`,
		"beyond float64":      `[{"sku":"tea","quantity":1e400}]`,
		"2^53+1":              `[{"sku":"tea","quantity":9007199254740993}]`,
		"a member twice, top": `[{"sku":"tea","quantity":1}],"items":[{"sku":"tea","quantity":1}]`,
	} {
		data := `{"orderId":"dr-1","customer":"ada","items":` + items + `}`
		want := "$.data.items.0.quantity"
		if strings.HasSuffix(name, "top") {
			want = "$.data.items"
		}
		env := `{"specversion":"1.0","id":"dr-1","source":"interop","type":"PlaceOrder","datacontenttype":"application/json",` +
			`"dataschema":"place-order/1.0","time":"2026-01-01T00:00:00Z","data":` + data + `}`

		status, _, raw, err := testkit.Send(bearerClient(key), http.MethodPost, s.URL+"/commands", "application/json", []byte(env))
		var restBody map[string]any
		if err != nil || status != http.StatusBadRequest || json.Unmarshal(raw, &restBody) != nil {
			t.Fatalf("%s: REST %d %v %s", name, status, err, raw)
		}
		hasPath(name+": REST", violations(name+": REST", restBody), want)

		mcpBody, failed := mcpCall(t, cs, "submitCommand", map[string]any{"body": json.RawMessage(env)}, nil)
		if !failed {
			t.Fatalf("%s: MCP submitCommand accepted it: %v", name, mcpBody)
		}
		sameJSON(t, name+": MCP submitCommand vs REST", mcpBody, restBody)
		typed, failed := mcpCall(t, cs, "place_order", json.RawMessage(data), nil)
		if !failed {
			t.Fatalf("%s: MCP place_order accepted it: %v", name, typed)
		}
		hasPath(name+": MCP place_order", violations(name+": MCP place_order", typed), want)

		for form, part := range map[string]string{
			"envelope":    env,
			"typed skill": `{"skill":"PlaceOrder","version":"1.0","data":` + data + `}`,
		} {
			rpc := `{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"data":` + part + `}]}}}`
			status, _, raw, err := testkit.Send(bearerClient(key), http.MethodPost, s.URL+"/a2a", "application/json", []byte(rpc))
			var out struct {
				ID    any `json:"id"`
				Error struct {
					Code float64          `json:"code"`
					Data []map[string]any `json:"data"`
				} `json:"error"`
			}
			if err != nil || status != http.StatusOK || json.Unmarshal(raw, &out) != nil || out.Error.Code != -32602 || out.ID != float64(7) {
				t.Fatalf("%s: A2A %s: %d %v %s", name, form, status, err, raw)
			}
			var body map[string]any
			for _, d := range out.Error.Data {
				if d["code"] != nil {
					body = d
				}
			}
			path := "$.params.message.parts.0.data." + strings.TrimPrefix(want, "$.")
			hasPath(name+": A2A "+form, violations(name+": A2A "+form, body), path)
		}
	}
	if after := commands(); after != before {
		t.Fatalf("refused commands grew the command log from %d to %d", before, after)
	}
}

// TestOneInputDecoder: an operation's input is read by one decoder over
// MCP and over A2A, numbers as written: limit 1e1 is refused as REST
// refuses ?limit=1e1, and limit 2 is taken, over both; a typed command's
// data is stored as sent, 1.0 as 1.0.
func TestOneInputDecoder(t *testing.T) {
	t.Parallel()
	s := a2aServer(t)
	key := a2aBootstrap
	cs := mcpSession(t, s.URL+"/mcp", key)
	a2a := func(input string) map[string]any {
		t.Helper()
		rpc := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER",` +
			`"parts":[{"data":{"skill":"listEvents","input":` + input + `}}]}}}`
		status, _, raw, err := testkit.Send(bearerClient(key), http.MethodPost, s.URL+"/a2a", "application/json", []byte(rpc))
		var out map[string]any
		if err != nil || status != http.StatusOK || json.Unmarshal(raw, &out) != nil {
			t.Fatalf("A2A listEvents %s: %d %v %s", input, status, err, raw)
		}
		return out
	}
	status, _, restRaw, err := testkit.Send(bearerClient(key), http.MethodGet, s.URL+"/events?limit=1e1", "", nil)
	var rest map[string]any
	if err != nil || status != http.StatusBadRequest || json.Unmarshal(restRaw, &rest) != nil {
		t.Fatalf("REST ?limit=1e1: %d %v %s", status, err, restRaw)
	}
	mcpBody, failed := mcpCall(t, cs, "listEvents", json.RawMessage(`{"limit":1e1}`), nil)
	if !failed {
		t.Fatalf("MCP listEvents limit 1e1: %v, want refused", mcpBody)
	}
	sameJSON(t, "MCP limit 1e1 vs REST", mcpBody, rest)
	out := a2a(`{"limit":1e1}`)
	e, _ := out["error"].(map[string]any)
	var details any
	if data, _ := e["data"].([]any); len(data) > 0 {
		for _, d := range data {
			if m, _ := d.(map[string]any); m["code"] != nil {
				delete(m, "@type") // the SDK's mark of a google.protobuf.Struct
				details = m
			}
		}
	}
	sameJSON(t, "A2A limit 1e1 vs REST", details, rest["error"])
	if _, failed := mcpCall(t, cs, "listEvents", json.RawMessage(`{"limit":2}`), nil); failed {
		t.Fatal("MCP listEvents limit 2 refused")
	}
	if out := a2a(`{"limit":2}`); out["error"] != nil {
		t.Fatalf("A2A listEvents limit 2: %v", out)
	}

	// A typed command's data goes into the log as sent.
	rpc := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"configuration":{"returnImmediately":true},"message":{"messageId":"m2","role":"ROLE_USER",` +
		`"parts":[{"data":{"skill":"PlaceOrder","version":"1.0","id":"exact-1","data":{"orderId":"exact-1","customer":"ada","items":[{"sku":"tea","quantity":1.0}]}}}]}}}`
	status, _, raw, err := testkit.Send(bearerClient(key), http.MethodPost, s.URL+"/a2a", "application/json", []byte(rpc))
	if err != nil || status != http.StatusOK || strings.Contains(string(raw), `"error"`) {
		t.Fatalf("A2A typed PlaceOrder: %d %v %s", status, err, raw)
	}
	stream, err := s.Conn.JS.Stream(context.Background(), "AGENTBUS_COMMANDS")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(context.Background(), "agentbus.cmd.default.PlaceOrder")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(msg.Data), `"data":{"orderId":"exact-1","customer":"ada","items":[{"sku":"tea","quantity":1.0}]}`) {
		t.Fatalf("stored command %s, want its data as sent", msg.Data)
	}
}

// TestSubscriptionSecretOnEveryTransport: getSubscriptionSecret is an
// operation like any other — a REST route, an MCP tool, an A2A skill —
// and all three answer the same current secret, which neither the
// creation nor the rotation answers on any transport, nor agentbus's log
// at debug level; a read-only key is refused it everywhere.
func TestSubscriptionSecretOnEveryTransport(t *testing.T) {
	t.Parallel()
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(rcv.Close)
	logs := &testkit.LockedBuffer{}
	debug := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := testkit.AgentbusWithLogger(t, debug, testkit.NoNATSPort, a2aBearer, func(c *settings.Config) { c.Webhooks.AllowPrivate = true })
	key := a2aBootstrap
	cs := mcpSession(t, s.URL+"/mcp", key)
	a2c, _ := a2aClient(t, s.URL, key, a2a.TransportProtocolJSONRPC)
	skill := func(c *a2aclient.Client, id string, input map[string]any) (map[string]any, error) {
		t.Helper()
		res, err := c.SendMessage(context.Background(), dataMessage(map[string]any{"skill": id, "input": input}))
		if err != nil {
			return nil, err
		}
		m, ok := res.(*a2a.Message)
		if !ok {
			t.Fatalf("skill %s answered %T, want a message", id, res)
		}
		out, _ := m.Parts[0].Data().(map[string]any)
		result, _ := out["result"].(map[string]any)
		return result, nil
	}
	body := map[string]any{"webhook": map[string]any{"url": rcv.URL + "/hook"}, "filter": map[string]any{"types": []string{"NeverEmitted"}}}
	created, failed := mcpCall(t, cs, "createSubscription", map[string]any{"body": body}, nil)
	id, _ := created["id"].(string)
	if failed || id == "" {
		t.Fatalf("MCP createSubscription: %v", created)
	}
	viaA2A, err := skill(a2c, "createSubscription", map[string]any{"body": body})
	if err != nil {
		t.Fatalf("A2A createSubscription: %v", err)
	}
	secretOf := func(what string) string {
		t.Helper()
		status, hdr, raw, err := testkit.Send(bearerClient(key), http.MethodGet, s.URL+"/subscriptions/"+id+"/secret", "", nil)
		var rest map[string]any
		if err != nil || status != http.StatusOK || json.Unmarshal(raw, &rest) != nil || hdr.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s: REST: %d %v, Cache-Control %q", what, status, err, hdr.Get("Cache-Control"))
		}
		tool, failed := mcpCall(t, cs, "getSubscriptionSecret", map[string]any{"id": id}, nil)
		if failed {
			t.Fatalf("%s: MCP getSubscriptionSecret failed: %v", what, tool["error"])
		}
		sk, err := skill(a2c, "getSubscriptionSecret", map[string]any{"id": id})
		if err != nil {
			t.Fatalf("%s: A2A getSubscriptionSecret: %v", what, err)
		}
		secret, _ := rest["secret"].(string)
		if !strings.HasPrefix(secret, "whsec_") || rest["id"] != id || len(rest) != 2 {
			t.Fatalf("%s: REST answered no {id, secret} of %s", what, id)
		}
		if tool["secret"] != secret || sk["secret"] != secret || tool["id"] != id || sk["id"] != id {
			t.Fatalf("%s: MCP and A2A do not answer the secret REST answers", what)
		}
		return secret
	}
	first := secretOf("created")
	rotated, failed := mcpCall(t, cs, "rotateSubscriptionSecret", map[string]any{"id": id, "body": map[string]any{}}, nil)
	if failed {
		t.Fatalf("MCP rotateSubscriptionSecret: %v", rotated)
	}
	second := secretOf("rotated")
	if second == first {
		t.Fatal("the secret did not change with the rotation")
	}
	for what, answer := range map[string]map[string]any{"MCP creation": created, "A2A creation": viaA2A, "MCP rotation": rotated} {
		raw, _ := json.Marshal(answer)
		if strings.Contains(string(raw), "secret\"") || strings.Contains(string(raw), "whsec_") {
			t.Errorf("the %s answer carries a secret: %s", what, raw)
		}
	}

	readOnly := testkit.Key(t, s, []string{"*"}, auth.ScopeRead)
	roMCP := mcpSession(t, s.URL+"/mcp", readOnly)
	roA2A, _ := a2aClient(t, s.URL, readOnly, a2a.TransportProtocolJSONRPC)
	if status, _, _, err := testkit.Send(bearerClient(readOnly), http.MethodGet, s.URL+"/subscriptions/"+id+"/secret", "", nil); err != nil || status != http.StatusForbidden {
		t.Fatalf("a read-only key over REST: %d %v, want 403", status, err)
	}
	if out, failed := mcpCall(t, roMCP, "getSubscriptionSecret", map[string]any{"id": id}, nil); !failed || strings.Contains(fmt.Sprint(out), second) {
		t.Fatal("a read-only key over MCP is not refused")
	}
	if _, err := skill(roA2A, "getSubscriptionSecret", map[string]any{"id": id}); !errors.Is(err, a2a.ErrUnauthorized) {
		t.Fatalf("a read-only key over A2A: %v, want unauthorized", err)
	}
	logged := logs.String()
	if !strings.Contains(logged, "level=") {
		t.Fatal("the logger captured nothing")
	}
	for _, secret := range []string{first, second} {
		if strings.Contains(logged, secret) || strings.Contains(logged, strings.TrimPrefix(secret, "whsec_")) {
			t.Fatal("a secret is in agentbus's log")
		}
	}
}
