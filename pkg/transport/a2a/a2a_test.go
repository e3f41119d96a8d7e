package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	a2acore "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/pkg/transport/a2a"
	"github.com/agentbus/agentbus/test/testkit"
)

const bootstrap = "a2a-unit-bootstrap-key-0123456789"

func start(t *testing.T, authType string, mutate ...func(*settings.Config)) *server.Server {
	t.Helper()
	return testkit.Agentbus(t, append([]func(*settings.Config){testkit.NoNATSPort, func(c *settings.Config) {
		c.Auth.Type = authType
		if authType != "none" {
			c.Auth.BootstrapKey = bootstrap
		}
		c.Limits.Rate = settings.Rate{}
	}}, mutate...)...)
}

func getCard(t *testing.T, base string) []byte {
	t.Helper()
	status, _, body, err := testkit.Send(http.DefaultClient, http.MethodGet, base+a2a.CardPath, "", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET %s%s: %d %v %s", base, a2a.CardPath, status, err, body)
	}
	return body
}

// TestCardForEveryAuthMethod: the card, read by the SDK's 1.0 and 0.3
// parsers alike, has a skill per operation and per domain command type (each with
// its schema in the extension), four interfaces at absolute URLs, streaming
// without push notifications, and the configured security scheme in both
// shapes.
func TestCardForEveryAuthMethod(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		auth, scheme, v03Type string
	}{
		{"none", "", ""},
		{"bearer", "bearer", "http"},
		{"apikey-header", "apiKey", "apiKey"},
		{"apikey-query", "apiKey", "apiKey"},
	} {
		t.Run(tc.auth, func(t *testing.T) {
			t.Parallel()
			s := start(t, tc.auth)
			raw := getCard(t, s.URL)
			if status, _, _, err := testkit.Send(http.DefaultClient, http.MethodHead, s.URL+a2a.CardPath, "", nil); err != nil || status != http.StatusOK {
				t.Fatalf("HEAD the card: %d %v", status, err)
			}
			card, err := agentcard.NewResolver(http.DefaultClient).Resolve(context.Background(), s.URL)
			if err != nil {
				t.Fatalf("the SDK's 1.0 resolver: %v", err)
			}
			legacy, err := a2av0.NewAgentCardParser()(raw)
			if err != nil {
				t.Fatalf("the SDK's 0.3 parser: %v", err)
			}
			var ids []string
			for _, sk := range card.Skills {
				ids = append(ids, sk.ID)
			}
			for _, op := range s.Ops.Operations() {
				if has := slices.Contains(ids, op.ID); has == (op.Disabled != "") {
					t.Errorf("operation %s (disabled: %q): skill on the card %v", op.ID, op.Disabled, has)
				}
			}
			// A typed skill per command type of the domain; the built-in
			// ones are reached through their operations, an internal one
			// not at all.
			for _, e := range s.Ops.Catalog().Commands() {
				if has := slices.Contains(ids, e.Type); has != e.Domain() {
					t.Errorf("command type %s (domain %v): skill on the card %v", e.Type, e.Domain(), has)
				}
			}
			for _, typ := range []string{"PlaceOrder", "AddNote"} {
				if !slices.Contains(ids, typ) {
					t.Errorf("no skill %s", typ)
				}
			}
			for _, typ := range []string{"RegisterAgent", "CreateSubscription", "MarkSubscriptionFailing"} {
				if slices.Contains(ids, typ) {
					t.Errorf("a skill %s", typ)
				}
			}
			if len(card.Capabilities.Extensions) != 1 || card.Capabilities.Extensions[0].URI != a2a.SkillSchemasExtension {
				t.Fatalf("extensions %+v", card.Capabilities.Extensions)
			}
			schemas, _ := card.Capabilities.Extensions[0].Params["schemas"].(map[string]any)
			for _, id := range ids {
				if schemas[id] == nil {
					t.Errorf("skill %s has no schema in the extension", id)
				}
			}
			if !card.Capabilities.Streaming || card.Capabilities.PushNotifications {
				t.Errorf("capabilities %+v, want streaming without push notifications", card.Capabilities)
			}
			host := strings.TrimPrefix(s.URL, "http://")
			want := []string{s.URL + "/a2a JSONRPC 1.0", s.URL + "/a2a/rest HTTP+JSON 1.0", s.URL + "/a2a/v0.3 JSONRPC 0.3", s.URL + "/a2a/v0.3/rest HTTP+JSON 0.3",
				host + " GRPC 1.0", host + " GRPC 0.3"}
			var got []string
			for _, i := range card.SupportedInterfaces {
				got = append(got, i.URL+" "+string(i.ProtocolBinding)+" "+string(i.ProtocolVersion))
			}
			if !slices.Equal(got, want) {
				t.Errorf("interfaces %v, want %v", got, want)
			}
			if !slices.ContainsFunc(legacy.SupportedInterfaces, func(i *a2acore.AgentInterface) bool { return i.URL == s.URL+"/a2a/v0.3" }) ||
				!slices.ContainsFunc(legacy.SupportedInterfaces, func(i *a2acore.AgentInterface) bool {
					return i.URL == host && i.ProtocolBinding == a2acore.TransportProtocolGRPC
				}) {
				t.Errorf("0.3 interfaces %v", legacy.SupportedInterfaces)
			}
			var doc struct {
				URL          string                    `json:"url"`
				Schemes      map[string]map[string]any `json:"securitySchemes"`
				Capabilities map[string]any            `json:"capabilities"`
			}
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			if v, ok := doc.Capabilities["pushNotifications"]; !ok || v != false {
				t.Errorf("capabilities %v, want pushNotifications: false said", doc.Capabilities)
			}
			if doc.URL != s.URL+"/a2a/v0.3" {
				t.Errorf("0.3 url %q, want the 0.3 JSON-RPC endpoint", doc.URL)
			}
			if tc.scheme == "" {
				if len(card.SecuritySchemes) != 0 {
					t.Errorf("auth none: schemes %v", card.SecuritySchemes)
				}
				return
			}
			if card.SecuritySchemes[a2acore.SecuritySchemeName(tc.scheme)] == nil || len(legacy.SecuritySchemes) == 0 {
				t.Fatalf("schemes (1.0) %v, (0.3) %v, want %s", card.SecuritySchemes, legacy.SecuritySchemes, tc.scheme)
			}
			if typ := doc.Schemes[tc.scheme]["type"]; typ != tc.v03Type {
				t.Errorf("0.3 type of %s: %v, want %s", tc.scheme, typ, tc.v03Type)
			}
			if k, ok := card.SecuritySchemes[a2acore.SecuritySchemeName(tc.scheme)].(a2acore.APIKeySecurityScheme); ok {
				wantLoc := a2acore.APIKeySecuritySchemeLocationHeader
				if strings.HasSuffix(tc.auth, "query") {
					wantLoc = a2acore.APIKeySecuritySchemeLocationQuery
				}
				if k.Location != wantLoc || k.Name == "" {
					t.Errorf("apiKey scheme %+v", k)
				}
			}
		})
	}
}

// rpc posts a JSON-RPC request to path with the bootstrap key and returns
// the HTTP status and the decoded answer.
func rpc(t *testing.T, s *server.Server, path, contentType, body string) (int, map[string]any) {
	t.Helper()
	status, _, raw, err := testkit.Send(http.DefaultClient, http.MethodPost, s.URL+path, contentType, []byte(body), "Authorization", "Bearer "+bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return status, out
}

// errorCode returns the JSON-RPC error code of an answer and the agentbus
// code of its first detail.
func errorCode(out map[string]any) (float64, string) {
	e, _ := out["error"].(map[string]any)
	code, _ := e["code"].(float64)
	data, _ := e["data"].([]any)
	for _, d := range data {
		if m, ok := d.(map[string]any); ok && m["code"] != nil {
			c, _ := m["code"].(string)
			return code, c
		}
	}
	return code, ""
}

// TestHostileMessages: malformed and hostile messages get a clear error,
// and nothing is queued.
func TestHostileMessages(t *testing.T) {
	t.Parallel()
	s := start(t, "bearer", func(c *settings.Config) { c.Limits.BodyBytes = 4096 })
	before := testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs
	send := func(part string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[` + part + `]}}}`
	}
	for name, tc := range map[string]struct {
		body     string
		rpcCode  float64
		codeWant string
	}{
		"no data part":           {send(`{"text":"hello"}`), -32602, "VALIDATION_FAILED"},
		"two data parts":         {send(`{"data":{"a":1}},{"data":{"b":2}}`), -32602, "VALIDATION_FAILED"},
		"data not an object":     {send(`{"data":[1,2]}`), -32602, "VALIDATION_FAILED"},
		"skill not a string":     {send(`{"data":{"skill":7}}`), -32602, "VALIDATION_FAILED"},
		"unknown skill":          {send(`{"data":{"skill":"dropTables","input":{}}}`), -32602, "VALIDATION_FAILED"},
		"unknown member":         {send(`{"data":{"skill":"listAgents","input":{},"extra":1}}`), -32602, "VALIDATION_FAILED"},
		"input not an object":    {send(`{"data":{"skill":"listAgents","input":"all"}}`), -32602, "VALIDATION_FAILED"},
		"input of wrong type":    {send(`{"data":{"skill":"listAgents","input":{"limit":{"x":1}}}}`), -32602, "VALIDATION_FAILED"},
		"unknown input":          {send(`{"data":{"skill":"listAgents","input":{"where":"1=1"}}}`), -32602, "VALIDATION_FAILED"},
		"missing required":       {send(`{"data":{"skill":"getAgent","input":{}}}`), -32602, "VALIDATION_FAILED"},
		"typed id not a string":  {send(`{"data":{"skill":"PlaceOrder","id":5,"data":{}}}`), -32602, "VALIDATION_FAILED"},
		"typed data invalid":     {send(`{"data":{"skill":"PlaceOrder","version":"1.0","data":{"orderId":"x"}}}`), -32602, "VALIDATION_FAILED"},
		"unknown version":        {send(`{"data":{"skill":"PlaceOrder","version":"9.9","data":{}}}`), -32602, "VALIDATION_FAILED"},
		"envelope of no type":    {send(`{"data":{"specversion":"1.0","id":"x","source":"s","type":"NoSuchType","datacontenttype":"application/json","dataschema":"no-such-type/1.0","time":"2026-01-01T00:00:00Z","data":{}}}`), -32602, "UNKNOWN_COMMAND_TYPE"},
		"injection switched off": {send(`{"data":{"skill":"injectEvent","input":{"body":{}}}}`), -32004, "CAPABILITY_NOT_SUPPORTED"},
		"a built-in type skill":  {send(`{"data":{"skill":"RegisterAgent","data":{"name":"a","accepts":[],"produces":[]}}}`), -32602, "VALIDATION_FAILED"},
		"an internal type skill": {send(`{"data":{"skill":"MarkSubscriptionFailing","data":{"id":"s","reason":"r","eventSeq":1}}}`), -32602, "VALIDATION_FAILED"},
		"an internal envelope":   {send(`{"data":{"specversion":"1.0","id":"x","source":"s","type":"MarkSubscriptionFailing","datacontenttype":"application/json","dataschema":"mark-subscription-failing/1.0","time":"2026-01-01T00:00:00Z","data":{"id":"s","reason":"r","eventSeq":1}}}`), -31403, "FORBIDDEN"},
		"another task's id":      {`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","taskId":"t-1","parts":[{"data":{"skill":"PlaceOrder","version":"1.0","data":{"orderId":"o","customer":"c","items":[{"sku":"s","quantity":1}]}}}]}}}`, -32602, "VALIDATION_FAILED"},
		"no such task":           {`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"nope"}}`, -32001, "TRACE_NOT_FOUND"},
		"invalid UTF-8":          {send(`{"data":{"skill":"AddNote","data":{"text":"caf` + "\xff" + `"}}}`), -32602, "MALFORMED_JSON"},
		"invalid UTF-8 task id":  {`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"` + "\xfe" + `"}}`, -32602, "MALFORMED_JSON"},
		"typed data twice":       {send(`{"data":{"skill":"AddNote","data":{"text":"a","text":"b"}}}`), -32602, "VALIDATION_FAILED"},
		"a member twice, deep":   {send(`{"data":{"skill":"PlaceOrder","version":"1.0","data":{"orderId":"o","customer":"c","items":[{"sku":"s","quantity":1,"quantity":0}]}}}`), -32602, "VALIDATION_FAILED"},
		"45-digit integer":       {send(`{"data":{"skill":"PlaceOrder","version":"1.0","data":{"orderId":"o","customer":"c","items":[{"sku":"s","quantity":123456789012345678901234567890123456789012345}]}}}`), -32602, "VALIDATION_FAILED"},
		"out of float64 range":   {send(`{"data":{"skill":"PlaceOrder","version":"1.0","data":{"orderId":"o","customer":"c","items":[{"sku":"s","quantity":1e400}]}}}`), -32602, "VALIDATION_FAILED"},
		"2^53+1 in an envelope":  {send(`{"data":{"specversion":"1.0","id":"x","source":"s","type":"PlaceOrder","datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-01T00:00:00Z","data":{"orderId":"o","customer":"c","items":[{"sku":"s","quantity":9007199254740993}]}}}`), -32602, "VALIDATION_FAILED"},
		"task id of a path":      {`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"../../etc"}}`, -32602, "VALIDATION_FAILED"},
	} {
		t.Run(name, func(t *testing.T) {
			status, out := rpc(t, s, "/a2a", "application/json", tc.body)
			code, ab := errorCode(out)
			if status != http.StatusOK || code != tc.rpcCode || ab != tc.codeWant {
				t.Fatalf("%d %v: got JSON-RPC %v / %q, want %v / %s", status, out, code, ab, tc.rpcCode, tc.codeWant)
			}
		})
	}
	for name, tc := range map[string]struct {
		path, ct, body string
		status         int
	}{
		"form body":      {"/a2a", "application/x-www-form-urlencoded", "a=b", http.StatusUnsupportedMediaType},
		"too large":      {"/a2a", "application/json", send(`{"data":{"pad":"` + strings.Repeat("x", 8192) + `"}}`), http.StatusOK},
		"not JSON":       {"/a2a/v0.3", "application/json", `{"jsonrpc":`, http.StatusOK},
		"unknown method": {"/a2a", "application/json", `{"jsonrpc":"2.0","id":1,"method":"DropTables","params":{}}`, http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			status, out := rpc(t, s, tc.path, tc.ct, tc.body)
			if status != tc.status || (status == http.StatusOK && out["error"] == nil) {
				t.Fatalf("got %d %v, want %d and an error", status, out, tc.status)
			}
		})
	}
	if after := testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs; after != before {
		t.Fatalf("the command log grew from %d to %d messages", before, after)
	}
}

// TestHTTPJSONBindingReadsTheBodyAsRESTDoes: over the HTTP+JSON binding,
// invalid UTF-8 is MALFORMED_JSON and a member name twice is
// VALIDATION_FAILED at its path, each in the binding's error form with
// agentbus's error body among its details; nothing is queued.
func TestHTTPJSONBindingReadsTheBodyAsRESTDoes(t *testing.T) {
	t.Parallel()
	s := start(t, "bearer")
	before := testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs
	for _, tc := range []struct{ data, code, path string }{
		{`{"text":"caf` + "\xff" + `"}`, "MALFORMED_JSON", ""},
		{`{"text":"a","text":"b"}`, "VALIDATION_FAILED", "$.message.parts.0.data.data.text"},
	} {
		body := `{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"data":{"skill":"AddNote","data":` + tc.data + `}}]}}`
		status, _, raw, err := testkit.Send(http.DefaultClient, http.MethodPost, s.URL+"/a2a/rest/message:send", "application/json", []byte(body),
			"Authorization", "Bearer "+bootstrap)
		var out struct {
			Error struct {
				Details []struct {
					Code    string `json:"code"`
					Details struct {
						Violations []struct{ Path string } `json:"violations"`
					} `json:"details"`
				} `json:"details"`
			} `json:"error"`
		}
		if err != nil || status != http.StatusBadRequest || json.Unmarshal(raw, &out) != nil || len(out.Error.Details) == 0 {
			t.Fatalf("%s: %d %v %s", tc.data, status, err, raw)
		}
		d := out.Error.Details[0]
		if d.Code != tc.code || (tc.path != "" && (len(d.Details.Violations) != 1 || d.Details.Violations[0].Path != tc.path)) {
			t.Errorf("%s: %s, want %s at %q", tc.data, raw, tc.code, tc.path)
		}
	}
	if after := testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs; after != before {
		t.Fatalf("the command log grew from %d to %d messages", before, after)
	}
}

// TestStreamsAreBounded: a caller holds at most push.streamsPerCredential
// streams; past it a streamed command is refused RATE_LIMITED before it is
// queued.
func TestStreamsAreBounded(t *testing.T) {
	t.Parallel()
	s := start(t, "bearer", func(c *settings.Config) { c.Push.StreamsPerCredential = 1 })
	hc := &http.Client{Transport: bearer{}}
	card, err := agentcard.NewResolver(hc).Resolve(context.Background(), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(context.Background(), card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ship := func() *a2acore.SendMessageRequest {
		return &a2acore.SendMessageRequest{Message: a2acore.NewMessage(a2acore.MessageRoleUser,
			a2acore.NewDataPart(map[string]any{"skill": "ShipOrder", "data": map[string]any{"orderId": "o-1", "carrier": "dhl"}}))}
	}
	// The first stream stays open: nobody processes ShipOrder.
	first := make(chan error, 1)
	opened := make(chan struct{})
	go func() {
		for _, err := range c.SendStreamingMessage(ctx, ship()) {
			if err != nil {
				first <- err
				return
			}
			select {
			case <-opened:
			default:
				close(opened)
			}
		}
		first <- nil
	}()
	select {
	case <-opened:
	case err := <-first:
		t.Fatalf("the first stream ended: %v", err)
	}
	before := testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs
	var got error
	for _, err := range c.SendStreamingMessage(ctx, ship()) {
		got = err
		break
	}
	var ae *a2acore.Error
	if !errors.As(got, &ae) || ae.Details["code"] != "RATE_LIMITED" {
		t.Fatalf("a second stream: %v, want RATE_LIMITED", got)
	}
	if after := testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs; after != before {
		t.Fatalf("the refused stream queued a command (%d → %d)", before, after)
	}
}

type bearer struct{}

func (bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+bootstrap)
	return http.DefaultTransport.RoundTrip(r)
}
