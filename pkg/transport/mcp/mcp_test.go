package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/bearer"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/pkg/transport/mcp"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
)

const bootstrap = "bootstrap-key-for-mcp-tests-0123456789"

// start runs agentbus with authentication typ and no rate limit.
func start(t *testing.T, typ string, mutate ...func(*settings.Config)) *server.Server {
	t.Helper()
	return testkit.Agentbus(t, append([]func(*settings.Config){func(c *settings.Config) {
		c.Auth.Type = typ
		if typ != "none" {
			c.Auth.BootstrapKey = bootstrap
		}
		c.Limits.Rate = settings.Rate{}
		testkit.NoNATSPort(c)
	}}, mutate...)...)
}

// mint creates a key of tenants with scopes.
func mint(t *testing.T, s *server.Server, tenants string, scopes ...auth.Scope) string {
	t.Helper()
	k, _ := testkit.Keys(t, s)
	key, _, err := k.Create(context.Background(), auth.NewKeyRequest{Tenants: strings.Split(tenants, ","), Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// credentials adds a credential to every request as method typ sends it.
type credentials struct {
	typ, cred string
	next      http.RoundTripper
}

func (c credentials) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	switch c.typ {
	case "bearer":
		r.Header.Set("Authorization", "Bearer "+c.cred)
	case "apikey-header":
		r.Header.Set(auth.DefaultHeaderScheme, c.cred)
	case "apikey-query":
		q := r.URL.Query()
		q.Set(auth.DefaultQueryScheme, c.cred)
		r.URL.RawQuery = q.Encode()
	}
	return c.next.RoundTrip(r)
}

// inbox keeps what a client session was pushed.
type inbox struct {
	mu      sync.Mutex
	logs    []*sdk.LoggingMessageParams
	updates []*sdk.ResourceUpdatedNotificationParams
}

// events returns the envelopes pushed as log messages for command corr.
func (b *inbox) events(corr string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range b.logs {
		if l.Meta["correlationId"] == corr {
			raw, _ := json.Marshal(l.Data)
			var ev map[string]any
			_ = json.Unmarshal(raw, &ev)
			out = append(out, ev)
		}
	}
	return out
}

// updated returns the events pushed as updates of uri.
func (b *inbox) updated(uri string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, u := range b.updates {
		if u.URI == uri {
			raw, _ := json.Marshal(u.Meta["event"])
			var ev map[string]any
			_ = json.Unmarshal(raw, &ev)
			out = append(out, ev)
		}
	}
	return out
}

// connect opens a session at endpoint with the credential, asking for log
// messages.
func connect(t *testing.T, endpoint, typ, cred string) (*sdk.ClientSession, *inbox, error) {
	t.Helper()
	b := &inbox{}
	c := sdk.NewClient(&sdk.Implementation{Name: "mcp-test", Version: "1"}, &sdk.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
			b.mu.Lock()
			b.logs = append(b.logs, r.Params)
			b.mu.Unlock()
		},
		ResourceUpdatedHandler: func(_ context.Context, r *sdk.ResourceUpdatedNotificationRequest) {
			b.mu.Lock()
			b.updates = append(b.updates, r.Params)
			b.mu.Unlock()
		},
	})
	tr := &sdk.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: credentials{typ: typ, cred: cred, next: http.DefaultTransport}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	if err := cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	return cs, b, nil
}

func mustConnect(t *testing.T, endpoint, typ, cred string) (*sdk.ClientSession, *inbox) {
	t.Helper()
	cs, b, err := connect(t, endpoint, typ, cred)
	if err != nil {
		t.Fatalf("connect %s: %v", endpoint, err)
	}
	return cs, b
}

// call calls a tool and returns its structured result and whether it
// failed.
func call(t *testing.T, cs *sdk.ClientSession, name string, args any, meta sdk.Meta) (map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args, Meta: meta})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: structured content %s: %v", name, raw, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d contents", name, len(res.Content))
	}
	text := res.Content[0].(*sdk.TextContent).Text
	var copyOf map[string]any
	if json.Unmarshal([]byte(text), &copyOf) != nil || fmt.Sprint(copyOf) != fmt.Sprint(out) {
		t.Errorf("%s: the text %s is not a copy of the structured content %s", name, text, raw)
	}
	return out, res.IsError
}

// errorCode returns error.code of a tool error's content.
func errorCode(t *testing.T, res map[string]any) string {
	t.Helper()
	e, _ := res["error"].(map[string]any)
	code, _ := e["code"].(string)
	if code == "" {
		t.Fatalf("no error body: %v", res)
	}
	return code
}

func placeOrder(id, order string) map[string]any {
	return map[string]any{"specversion": "1.0", "id": id, "source": "mcp-test", "type": "PlaceOrder",
		"datacontenttype": "application/json", "dataschema": "place-order/1.0", "time": "2026-01-01T12:00:00Z",
		"data": map[string]any{"orderId": order, "customer": "ada", "items": []any{map[string]any{"sku": "tea", "quantity": 2}}}}
}

func orderData(order string) map[string]any {
	return map[string]any{"orderId": order, "customer": "ada", "currency": "EUR", "items": []any{map[string]any{"sku": "tea", "quantity": 1}}}
}

// waitEvent waits until the session was pushed an event of type typ of
// command corr, after the tool call that submitted it returned.
func waitEvent(t *testing.T, b *inbox, corr, typ string) map[string]any {
	t.Helper()
	var got map[string]any
	testkit.Eventually(t, typ+" of "+corr+" pushed", func() bool {
		for _, ev := range b.events(corr) {
			if ev["type"] == typ {
				got = ev
				return true
			}
		}
		return false
	})
	return got
}

// TestToolsSubmitAndPush: the tools are the operations (but those switched
// off) and a typed tool per domain command type whose input schema is the
// command's; submitCommand and a typed tool return the correlation id, and
// the command's events are pushed to the session after the call returned,
// a rejection's CommandRejected too.
func TestToolsSubmitAndPush(t *testing.T) {
	t.Parallel()
	s := start(t, "bearer")
	key := mint(t, s, "default", auth.ScopeRead, auth.ScopeWrite)
	cs, b := mustConnect(t, s.URL+"/mcp", "bearer", key)

	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*sdk.Tool{}
	for _, tl := range list.Tools {
		tools[tl.Name] = tl
	}
	for _, op := range s.Ops.Operations() {
		if _, ok := tools[op.ID]; ok == (op.Disabled != "") {
			t.Errorf("operation %s (disabled %q): tool listed %v", op.ID, op.Disabled, ok)
		}
	}
	// Typed tools are the domain's commands alone: the built-in ones are
	// reached through their operations, an internal one not at all.
	for _, e := range s.Ops.Catalog().Commands() {
		if _, ok := tools[ops.SnakeCase(e.Type)]; ok != e.Domain() {
			t.Errorf("command %s (domain %v): typed tool listed %v", e.Type, e.Domain(), ok)
		}
	}
	on := 0
	for _, op := range s.Ops.Operations() {
		if op.Disabled == "" {
			on++
		}
	}
	if want := on + len(s.Ops.TypedCommands()); len(list.Tools) != want || len(s.Ops.TypedCommands()) != 4 {
		t.Errorf("%d tools, want %d: the operations and the example catalogue's 4 command types", len(list.Tools), want)
	}
	for _, e := range s.Ops.TypedCommands() {
		tl := tools[strings.ReplaceAll(strings.ToLower(e.Schema), "-", "_")]
		if tl == nil {
			t.Errorf("no typed tool for %s", e.Type)
			continue
		}
		var doc, in map[string]any
		_ = json.Unmarshal(e.Doc, &doc)
		raw, _ := json.Marshal(tl.InputSchema)
		_ = json.Unmarshal(raw, &in)
		if fmt.Sprint(in["properties"]) != fmt.Sprint(doc["properties"]) || fmt.Sprint(in["required"]) != fmt.Sprint(doc["required"]) {
			t.Errorf("%s: input schema %s is not the command's schema", tl.Name, raw)
		}
	}

	res, failed := call(t, cs, "submitCommand", map[string]any{"body": placeOrder("c-1", "o-1")}, nil)
	if failed || res["status"] != "accepted" {
		t.Fatalf("submitCommand: %v", res)
	}
	first := res["id"].(string)
	ev := waitEvent(t, b, first, "OrderPlaced")
	if d, _ := ev["data"].(map[string]any); d["orderId"] != "o-1" {
		t.Errorf("pushed event %v", ev)
	}

	res, failed = call(t, cs, "place_order", orderData("o-2"), sdk.Meta{mcp.MetaCommandID: "typed-1"})
	if failed || res["status"] != "accepted" {
		t.Fatalf("place_order: %v", res)
	}
	typed := res["id"].(string)
	waitEvent(t, b, typed, "OrderPlaced")
	// The same id again is the same command.
	if again, _ := call(t, cs, "place_order", orderData("o-2"), sdk.Meta{mcp.MetaCommandID: "typed-1"}); again["id"] != typed {
		t.Errorf("the same command id gave %v, want %s", again["id"], typed)
	}
	// The typed command's envelope is complete: its trace names it.
	trace, failed := call(t, cs, "getTrace", map[string]any{"id": typed}, nil)
	if cmd, _ := trace["command"].(map[string]any); failed || cmd["type"] != "PlaceOrder" || cmd["id"] != "typed-1" || !strings.HasPrefix(fmt.Sprint(cmd["source"]), "agentbus/caller/") {
		t.Errorf("trace of the typed command: %v", trace)
	}

	// o-2 again under a fresh id: rejected by the aggregate rule.
	res, _ = call(t, cs, "place_order", orderData("o-2"), nil)
	rejected := res["id"].(string)
	ev = waitEvent(t, b, rejected, "CommandRejected")
	if d, _ := ev["data"].(map[string]any); d["code"] != "AGGREGATE_ALREADY_EXISTS" {
		t.Errorf("CommandRejected %v", ev)
	}
	if got := b.events(first); len(got) != 1 {
		t.Errorf("the first command's events pushed %d times", len(got))
	}
}

// TestResourceSubscribeAndRead: a command's resource is its story; a
// subscription to it is told of each event as it is published, with the
// event in _meta, and a read then holds it.
func TestResourceSubscribeAndRead(t *testing.T) {
	t.Parallel()
	s := start(t, "bearer")
	key := mint(t, s, "default", auth.ScopeRead, auth.ScopeWrite)
	cs, b := mustConnect(t, s.URL+"/mcp", "bearer", key)
	ctx := context.Background()

	// ShipOrder has no rule: it waits for a processor, played here.
	res, failed := call(t, cs, "ship_order", map[string]any{"orderId": "o-9", "carrier": "dhl"}, nil)
	if failed {
		t.Fatalf("ship_order: %v", res)
	}
	corr := res["id"].(string)
	uri := mcp.CommandURI(corr)
	if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	story := read(t, cs, uri)
	if story["id"] != corr || len(story["events"].([]any)) != 0 {
		t.Fatalf("story before processing: %v", story)
	}

	env := (`{"specversion":"1.0","id":"shipped-1","source":"test-processor","type":"OrderShipped","datacontenttype":"application/json","time":"2026-01-01T12:00:00Z","data":{"orderId":"o-9"}}`)
	msg := &nats.Msg{Subject: bus.Subjects{Prefix: "agentbus"}.Event(bus.RootEvents, "default", "order", "o-9", "OrderShipped"),
		Data: []byte(env), Header: nats.Header{}}
	msg.Header.Set(bus.HeaderCorrelationID, corr)
	msg.Header.Set(bus.HeaderMsgID, "shipped-1")
	if _, err := s.Conn.NC.RequestMsg(msg, 5*time.Second); err != nil {
		t.Fatalf("publish the event: %v", err)
	}
	testkit.Eventually(t, "resource update with the event", func() bool {
		for _, ev := range b.updated(uri) {
			if ev["type"] == "OrderShipped" && ev["id"] == "shipped-1" {
				return true
			}
		}
		return false
	})
	waitEvent(t, b, corr, "OrderShipped")
	testkit.Eventually(t, "the story holds the event", func() bool {
		evs, _ := read(t, cs, uri)["events"].([]any)
		return len(evs) == 1
	})

	// Schemas are resources too.
	doc := read(t, cs, "agentbus://schemas/commands/place-order/2.0")
	if doc["title"] != "PlaceOrder" {
		t.Errorf("command schema: %v", doc)
	}
	if doc := read(t, cs, "agentbus://schemas/events/order-placed/1.0"); doc["type"] != "object" {
		t.Errorf("event schema: %v", doc)
	}
	var werr *jsonrpc.Error
	if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "agentbus://schemas/commands/nope/1.0"}); !asRPC(err, &werr) || !strings.Contains(werr.Message, "SCHEMA_NOT_FOUND") {
		t.Errorf("unknown schema: %v", err)
	}
	if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: mcp.CommandURI("00000000-0000-0000-0000-000000000000")}); err == nil {
		t.Error("subscribing to an unknown command succeeded")
	}
}

func asRPC(err error, target **jsonrpc.Error) bool {
	for err != nil {
		if e, ok := err.(*jsonrpc.Error); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// read reads a JSON resource.
func read(t *testing.T, cs *sdk.ClientSession, uri string) map[string]any {
	t.Helper()
	res, err := cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatalf("read %s: %v", uri, err)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &out); err != nil {
		t.Fatalf("read %s: %v", uri, err)
	}
	return out
}

// TestTenantIsolation: a session of tenant a is never pushed b's events and
// cannot read or subscribe to b's commands; a's credential cannot open
// b's endpoint, and a's session id is unknown on b's.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	s := start(t, "bearer", func(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"a", "b"} })
	ka := mint(t, s, "a", auth.ScopeRead, auth.ScopeWrite)
	kb := mint(t, s, "b", auth.ScopeRead, auth.ScopeWrite)
	csA, inA := mustConnect(t, s.URL+"/a/mcp", "bearer", ka)
	csB, inB := mustConnect(t, s.URL+"/b/mcp", "bearer", kb)

	resB, _ := call(t, csB, "place_order", orderData("o-b"), nil)
	corrB := resB["id"].(string)
	resA, _ := call(t, csA, "place_order", orderData("o-a"), nil)
	corrA := resA["id"].(string)
	waitEvent(t, inB, corrB, "OrderPlaced")
	waitEvent(t, inA, corrA, "OrderPlaced")
	inA.mu.Lock()
	for _, l := range inA.logs {
		if raw, _ := json.Marshal(l.Data); strings.Contains(string(raw), "o-b") {
			t.Errorf("tenant a's session was pushed %s", raw)
		}
	}
	inA.mu.Unlock()

	ctx := context.Background()
	if _, err := csA.ReadResource(ctx, &sdk.ReadResourceParams{URI: mcp.CommandURI(corrB)}); err == nil {
		t.Error("tenant a read tenant b's command")
	}
	if err := csA.Subscribe(ctx, &sdk.SubscribeParams{URI: mcp.CommandURI(corrB)}); err == nil {
		t.Error("tenant a subscribed to tenant b's command")
	}
	if res, failed := call(t, csA, "getTrace", map[string]any{"id": corrB}, nil); !failed || errorCode(t, res) != "TRACE_NOT_FOUND" {
		t.Errorf("tenant a's getTrace of b's command: %v", res)
	}

	if _, _, err := connect(t, s.URL+"/b/mcp", "bearer", ka); err == nil {
		t.Error("a credential of tenant a opened a session on tenant b")
	}
	status, body := post(t, s.URL+"/b/mcp", ka, "")
	if status != http.StatusForbidden || !strings.Contains(body, "FORBIDDEN") {
		t.Errorf("tenant a's credential on b's endpoint: %d %s", status, body)
	}
	// A's session id, with b's credential on b's endpoint, and with a's
	// credential elsewhere: unknown.
	status, body = post(t, s.URL+"/b/mcp", kb, csA.ID())
	if status != http.StatusNotFound {
		t.Errorf("a's session on b's endpoint: %d %s", status, body)
	}
	_, _, raw, err := testkit.Send(http.DefaultClient, http.MethodGet, s.URL+"/b/.well-known/agentproto", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"mcp":{"transport":"streamable-http","server":"`+s.URL+`/b/mcp","push":true}`) {
		t.Errorf("tenant b's manifest: %s", raw)
	}
	kb2 := mint(t, s, "a,b", auth.ScopeRead, auth.ScopeWrite)
	if status, body = post(t, s.URL+"/a/mcp", kb2, csA.ID()); status != http.StatusNotFound {
		t.Errorf("a's session with another credential: %d %s", status, body)
	}
}

// post sends endpoint, with a bearer credential, an initialize request or,
// with a session id, a tools/list request, and returns the answer's status
// and body.
func post(t *testing.T, endpoint, cred, session string) (int, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	if session != "" {
		body = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	}
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	if session != "" {
		req.Header.Set(mcp.SessionHeader, session)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestCredentialsAndScopes: every authentication method admits its
// credential and refuses none or a wrong one (401); a read-only key gets
// FORBIDDEN tool errors from submitCommand and the typed tools, and reads.
func TestCredentialsAndScopes(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"bearer", "apikey-header", "apikey-query"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			s := start(t, typ)
			ro := mint(t, s, "default", auth.ScopeRead)
			if _, _, err := connect(t, s.URL+"/mcp", typ, ""); err == nil {
				t.Error("connected without a credential")
			}
			if _, _, err := connect(t, s.URL+"/mcp", typ, "abk_wrong_0123456789"); err == nil {
				t.Error("connected with a wrong credential")
			}
			if status, body := post(t, s.URL+"/mcp", "", ""); status != http.StatusUnauthorized || !strings.Contains(body, "UNAUTHENTICATED") {
				t.Errorf("without a credential: %d %s", status, body)
			}
			cs, _ := mustConnect(t, s.URL+"/mcp", typ, ro)
			for name, args := range map[string]any{"submitCommand": map[string]any{"body": placeOrder("ro-1", "o-ro")}, "place_order": orderData("o-ro")} {
				if res, failed := call(t, cs, name, args, nil); !failed || errorCode(t, res) != "FORBIDDEN" {
					t.Errorf("%s with a read-only key: %v", name, res)
				}
			}
			if res, failed := call(t, cs, "listCommandCatalog", nil, nil); failed || res["commands"] == nil {
				t.Errorf("listCommandCatalog with a read-only key: %v", res)
			}
		})
	}
}

// TestErrorsAsREST: a tool's failure carries the code and violations
// REST answers for the same input; bad arguments change nothing.
func TestErrorsAsREST(t *testing.T) {
	t.Parallel()
	s := start(t, "none")
	cs, _ := mustConnect(t, s.URL+"/mcp", "none", "")
	bad := placeOrder("bad-1", "o-bad")
	bad["data"].(map[string]any)["items"] = []any{map[string]any{"sku": "tea", "quantity": 0}}
	delete(bad["data"].(map[string]any), "customer")
	res, failed := call(t, cs, "submitCommand", map[string]any{"body": bad}, nil)
	raw, _ := json.Marshal(bad)
	status, _, restBody, err := testkit.Send(http.DefaultClient, http.MethodPost, s.URL+"/commands", "application/json", raw)
	if err != nil {
		t.Fatal(err)
	}
	var rest map[string]any
	_ = json.Unmarshal(restBody, &rest)
	if !failed || status != 400 || fmt.Sprint(res["error"]) != fmt.Sprint(rest["error"]) {
		t.Errorf("submitCommand of a bad command: %v\nREST %d: %v", res, status, rest)
	}
	cases := []struct {
		tool string
		args any
		meta sdk.Meta
		code string
	}{
		{"place_order", map[string]any{"orderId": "o-x"}, nil, "VALIDATION_FAILED"},
		{"place_order", orderData("o-y"), sdk.Meta{mcp.MetaCommandID: 7}, "VALIDATION_FAILED"},
		{"listEvents", map[string]any{"nope": "1"}, nil, "VALIDATION_FAILED"},
		{"listEvents", map[string]any{"limit": map[string]any{}}, nil, "VALIDATION_FAILED"},
		{"listEvents", map[string]any{"limit": "100000"}, nil, "VALIDATION_FAILED"},
		{"getCommandSchema", map[string]any{"schema": "nope", "version": "1.0"}, nil, "SCHEMA_NOT_FOUND"},
		{"getCommandSchema", map[string]any{"schema": "nope"}, nil, "VALIDATION_FAILED"},
		{"submitCommand", map[string]any{"body": map[string]any{"type": "Nope"}}, nil, "VALIDATION_FAILED"},
		{"submitCommand", map[string]any{"body": map[string]any{"specversion": "1.0", "id": "x", "source": "s", "type": "MarkSubscriptionFailing",
			"datacontenttype": "application/json", "dataschema": "mark-subscription-failing/1.0", "time": "2026-01-01T00:00:00Z",
			"data": map[string]any{"id": "s", "reason": "r", "eventSeq": 1}}}, nil, "FORBIDDEN"},
		{"getAgent", map[string]any{"id": "ghost"}, nil, "AGENT_NOT_FOUND"},
	}
	for _, c := range cases {
		res, failed := call(t, cs, c.tool, c.args, c.meta)
		if !failed || errorCode(t, res) != c.code {
			t.Errorf("%s %v: %v, want %s", c.tool, c.args, res, c.code)
		}
	}
	// Nothing was queued by any of them.
	events, _ := call(t, cs, "listEvents", map[string]any{"type": []string{"OrderPlaced", "CommandRejected"}}, nil)
	if evs, _ := events["events"].([]any); len(evs) != 0 {
		t.Errorf("bad calls queued commands: %v", evs)
	}
}

// TestSessionBoundsAndManifest: past the sessions of a credential a new one
// is refused RATE_LIMITED; ending one frees its place; the manifest names
// the endpoint.
func TestSessionBoundsAndManifest(t *testing.T) {
	t.Parallel()
	s := start(t, "bearer", func(c *settings.Config) { c.Push.MCP.SessionsPerCredential = 1 })
	key := mint(t, s, "default", auth.ScopeRead)
	cs, _ := mustConnect(t, s.URL+"/mcp", "bearer", key)
	status, body := post(t, s.URL+"/mcp", key, "")
	if status != http.StatusTooManyRequests || !strings.Contains(body, "RATE_LIMITED") {
		t.Errorf("a second session: %d %s", status, body)
	}
	_ = cs.Close()
	testkit.Eventually(t, "the session's place freed", func() bool { return s.MCP.Sessions() == 0 })
	mustConnect(t, s.URL+"/mcp", "bearer", key)

	_, _, raw, err := testkit.Send(http.DefaultClient, http.MethodGet, s.URL+"/.well-known/agentproto", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		MCP map[string]any `json:"mcp"`
	}
	_ = json.Unmarshal(raw, &m)
	if m.MCP["server"] != s.URL+"/mcp" || m.MCP["push"] != true || m.MCP["transport"] != "streamable-http" {
		t.Errorf("manifest mcp block %v", m.MCP)
	}
}

// TestShutdownEndsSessions: stopping agentbus ends the sessions' event
// streams instead of waiting for them.
func TestShutdownEndsSessions(t *testing.T) {
	t.Parallel()
	s := start(t, "none")
	cs, _ := mustConnect(t, s.URL+"/mcp", "none", "")
	// The client holds its event stream (GET) open: a second one is a
	// conflict.
	testkit.Eventually(t, "the client's event stream open", func() bool {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/mcp", nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set(mcp.SessionHeader, cs.ID())
		req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode == http.StatusConflict
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop with a session's event stream open: %v", err)
	}
	if n := s.MCP.Sessions(); n != 0 {
		t.Errorf("%d sessions left", n)
	}
}

// TestWatchesBounded: past push.mcp.watches the oldest watch of a session
// ends: its command's later events are no longer pushed, the newer's are.
func TestWatchesBounded(t *testing.T) {
	t.Parallel()
	s := start(t, "none", func(c *settings.Config) { c.Push.MCP.Watches = 1 })
	cs, b := mustConnect(t, s.URL+"/mcp", "none", "")
	first, _ := call(t, cs, "ship_order", map[string]any{"orderId": "o-w1", "carrier": "dhl"}, nil)
	second, _ := call(t, cs, "ship_order", map[string]any{"orderId": "o-w2", "carrier": "dhl"}, nil)
	// Published in this order, the first's event would be pushed before
	// the second's.
	for _, c := range []struct{ corr, order string }{{first["id"].(string), "o-w1"}, {second["id"].(string), "o-w2"}} {
		env := `{"specversion":"1.0","id":"shipped-` + c.order + `","source":"test-processor","type":"OrderShipped","datacontenttype":"application/json","time":"2026-01-01T12:00:00Z","data":{"orderId":"` + c.order + `"}}`
		msg := &nats.Msg{Subject: bus.Subjects{Prefix: "agentbus"}.Event(bus.RootEvents, "default", "order", c.order, "OrderShipped"),
			Data: []byte(env), Header: nats.Header{}}
		msg.Header.Set(bus.HeaderCorrelationID, c.corr)
		msg.Header.Set(bus.HeaderMsgID, "shipped-"+c.order)
		if _, err := s.Conn.NC.RequestMsg(msg, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	waitEvent(t, b, second["id"].(string), "OrderShipped")
	if got := b.events(first["id"].(string)); len(got) != 0 {
		t.Errorf("the evicted watch's event was pushed: %v", got)
	}
}

// TestEveryOperationIsATool calls every operation of the table through its
// tool: each answers a result or a tool error with one of its error codes,
// as over REST; one that takes no input succeeds.
func TestEveryOperationIsATool(t *testing.T) {
	t.Parallel()
	s := start(t, "none", func(c *settings.Config) { c.Events.AllowInjection = true })
	cs, _ := mustConnect(t, s.URL+"/mcp", "none", "")
	sample := map[string]string{"schema": "place-order", "version": "1.0", "id": "no-such-id"}
	for _, op := range s.Ops.Operations() {
		args := map[string]any{}
		for _, p := range op.Params {
			if v, ok := sample[p.Name]; ok && p.Required {
				args[p.Name] = v
			}
		}
		if op.ID == "listEventCatalog" {
			args["view"] = "catalog"
		}
		if op.Body != nil {
			args["body"] = map[string]any{}
		}
		res, failed := call(t, cs, op.ID, args, nil)
		if !failed {
			continue
		}
		if len(op.Params) == 0 && op.Body == nil {
			t.Errorf("%s takes no input and failed: %v", op.ID, res)
			continue
		}
		if code := errs.Code(errorCode(t, res)); !slices.Contains(op.Errors, code) && !slices.Contains(ops.CommonErrors, code) {
			t.Errorf("%s: %v, not one of its error codes", op.ID, res)
		}
	}
}

// TestSessionEndsWhenItsKeyIsRevoked: a session ends at its next check
// (push.recheck) once the key that opened it is revoked; another key's
// session goes on.
func TestSessionEndsWhenItsKeyIsRevoked(t *testing.T) {
	t.Parallel()
	s := start(t, "bearer", func(c *settings.Config) { c.Push.Recheck = settings.Duration(time.Second) })
	keys, _ := testkit.Keys(t, s)
	doomed, rec, err := keys.Create(context.Background(), auth.NewKeyRequest{Tenants: []string{"default"}, Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	kept := mint(t, s, "default", auth.ScopeRead)
	mustConnect(t, s.URL+"/mcp", "bearer", doomed)
	cs, _ := mustConnect(t, s.URL+"/mcp", "bearer", kept)
	if n := s.MCP.Sessions(); n != 2 {
		t.Fatalf("%d sessions open, want 2", n)
	}
	if _, err := keys.Revoke(context.Background(), rec.ID); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the revoked key's session ended", func() bool { return s.MCP.Sessions() == 1 })
	if _, failed := call(t, cs, "listAgents", map[string]any{}, nil); failed {
		t.Fatal("the other key's session no longer answers")
	}
}

// TestSessionOfARevokedKeyEndsWhileEventsFlow: a session pushed an event
// of its command every second ends within push.recheck (1 s here) and the
// second a revocation takes to reach the replica, with a margin for a
// loaded machine, long before its next keep-alive (30 s): the credential
// is checked on a fixed period, however busy the session is.
func TestSessionOfARevokedKeyEndsWhileEventsFlow(t *testing.T) {
	t.Parallel()
	s := start(t, "bearer", func(c *settings.Config) { c.Push.Recheck = settings.Duration(time.Second) })
	keys, _ := testkit.Keys(t, s)
	doomed, rec, err := keys.Create(context.Background(), auth.NewKeyRequest{Tenants: []string{"default"}, Scopes: []auth.Scope{auth.ScopeRead, auth.ScopeWrite}})
	if err != nil {
		t.Fatal(err)
	}
	cs, b := mustConnect(t, s.URL+"/mcp", "bearer", doomed)
	res, failed := call(t, cs, "ship_order", map[string]any{"orderId": "o-flow", "carrier": "dhl"}, nil)
	if failed {
		t.Fatalf("ship_order: %v", res)
	}
	corr := res["id"].(string)
	flowEvents(t, s, corr)
	testkit.Eventually(t, "events pushed to the session", func() bool { return len(b.events(corr)) >= 2 })
	if _, err := keys.Revoke(context.Background(), rec.ID); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, "the revoked key's session ended", 6*time.Second, func() bool { return s.MCP.Sessions() == 0 })
}

// flowEvents publishes an event of command corr every second, as its
// processor would, until the test ends.
func flowEvents(t *testing.T, s *server.Server, corr string) {
	t.Helper()
	testkit.Every(t, time.Second, func(n int) {
		id := fmt.Sprintf("flow-%s-%d", corr, n)
		env := fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"test-processor","type":"OrderShipped","datacontenttype":"application/json","time":"2026-01-01T12:00:00Z","data":{"orderId":"o-flow"}}`, id)
		msg := &nats.Msg{Subject: bus.Subjects{Prefix: "agentbus"}.Event(bus.RootEvents, "default", "order", "o-flow", "OrderShipped"),
			Data: []byte(env), Header: nats.Header{}}
		msg.Header.Set(bus.HeaderCorrelationID, corr)
		msg.Header.Set(bus.HeaderMsgID, id)
		_, _ = s.Conn.NC.RequestMsg(msg, 5*time.Second)
	})
}

// TestSessionOfAnExpiredTokenEndsAtItsExpiry: a session opened with a
// bearer token, pushed an event of its command every second, ends at the
// token's exp, not at a later check (push.recheck is left at 15 s).
func TestSessionOfAnExpiredTokenEndsAtItsExpiry(t *testing.T) {
	t.Parallel()
	const signing = "mcp-test-token-signing-key-0123456789abcd"
	s := start(t, "bearer", func(c *settings.Config) { c.Auth.TokenSigningKey = signing })
	keys, _ := testkit.Keys(t, s)
	_, rec, err := keys.Create(context.Background(), auth.NewKeyRequest{Tenants: []string{"default"}, Scopes: []auth.Scope{auth.ScopeRead, auth.ScopeWrite}})
	if err != nil {
		t.Fatal(err)
	}
	token, exp, err := bearer.New([]byte(signing), s.URL, 5*time.Second, time.Now, nil).Issue(rec.ID, []string{"default"}, "read write", "")
	if err != nil {
		t.Fatal(err)
	}
	cs, b := mustConnect(t, s.URL+"/mcp", "bearer", token)
	res, failed := call(t, cs, "ship_order", map[string]any{"orderId": "o-flow", "carrier": "dhl"}, nil)
	if failed {
		t.Fatalf("ship_order: %v", res)
	}
	corr := res["id"].(string)
	flowEvents(t, s, corr)
	testkit.Eventually(t, "an event pushed to the session", func() bool { return len(b.events(corr)) >= 1 })
	for s.MCP.Sessions() != 0 {
		if time.Now().After(exp.Add(time.Second)) {
			t.Fatalf("the session of a token that expired at %s goes on", exp.Format(time.RFC3339))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if time.Now().Before(exp) {
		t.Fatalf("the session ended before its token expired at %s", exp.Format(time.RFC3339))
	}
}
