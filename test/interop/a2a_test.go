package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/bearer"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
)

const a2aBootstrap = "a2a-interop-bootstrap-key-0123456789"

// a2aServer starts agentbus with bearer authentication (the bootstrap key
// has every scope on every tenant) and no rate limit, then applies mutate.
func a2aServer(t *testing.T, mutate ...func(*settings.Config)) *server.Server {
	t.Helper()
	return testkit.Agentbus(t, append([]func(*settings.Config){testkit.NoNATSPort, a2aBearer}, mutate...)...)
}

func a2aBearer(c *settings.Config) {
	c.Auth.Type = "bearer"
	c.Auth.BootstrapKey = a2aBootstrap
	c.Limits.Rate = settings.Rate{}
}

// bearerClient is an HTTP client that sends key as a bearer credential
// ("" for none).
func bearerClient(key string) *http.Client {
	return &http.Client{Timeout: 60 * time.Second, Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		if key != "" {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+key)
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// a2aClient resolves the card at base (a server's URL, or a tenant's base
// in multi-tenant mode) and returns the SDK's client on the interface of
// binding (1.0), sending key.
func a2aClient(t *testing.T, base, key string, binding a2a.TransportProtocol) (*a2aclient.Client, *a2a.AgentCard) {
	t.Helper()
	return a2aClientOf(t, base, key, a2a.Version, binding)
}

// a2aClientOf is a2aClient on the interface of a protocol version (1.0,
// or 0.3 through the SDK's compatibility transports).
func a2aClientOf(t *testing.T, base, key string, version a2a.ProtocolVersion, binding a2a.TransportProtocol) (*a2aclient.Client, *a2a.AgentCard) {
	t.Helper()
	ctx := context.Background()
	hc := bearerClient(key)
	card, err := agentcard.NewResolver(hc).Resolve(ctx, base)
	if err != nil {
		t.Fatalf("resolve the agent card: %v", err)
	}
	var iface *a2a.AgentInterface
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == binding && i.ProtocolVersion == version {
			iface = i
		}
	}
	if iface == nil {
		t.Fatalf("the card has no %s %s interface: %+v", binding, version, card.SupportedInterfaces)
	}
	c, err := a2aclient.NewFromEndpoints(ctx, []*a2a.AgentInterface{iface},
		a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc),
		a2av0.WithJSONRPCTransport(a2av0.JSONRPCTransportConfig{Client: hc}), a2av0.WithRESTTransport(a2av0.RESTTransportConfig{Client: hc}))
	if err != nil {
		t.Fatal(err)
	}
	return c, card
}

// order is a PlaceOrder envelope for orderID with a fresh id.
func order(orderID string) map[string]any {
	return map[string]any{"specversion": "1.0", "id": uuid.NewString(), "source": "a2a-interop", "type": "PlaceOrder",
		"datacontenttype": "application/json", "dataschema": "place-order/1.0", "time": "2026-01-01T12:00:00Z",
		"data": map[string]any{"orderId": orderID, "customer": "ada", "items": []any{map[string]any{"sku": "tea", "quantity": 2}}}}
}

func dataMessage(v any) *a2a.SendMessageRequest {
	return &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(v))}
}

// restEvents returns GET /events?correlationId= of a command, as JSON
// values.
func restEvents(t *testing.T, base, key, corr string) []any {
	t.Helper()
	status, _, body, err := testkit.Send(bearerClient(key), http.MethodGet, base+"/events?correlationId="+corr, "", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /events?correlationId=%s: %d %v %s", corr, status, err, body)
	}
	var page struct {
		Events []any `json:"events"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	return page.Events
}

// artifactEnvelopes returns the data part of each artifact, as JSON values.
func artifactEnvelopes(t *testing.T, task *a2a.Task) []any {
	t.Helper()
	var out []any
	for _, a := range task.Artifacts {
		if len(a.Parts) != 1 {
			t.Fatalf("artifact %s has %d parts, want 1", a.ID, len(a.Parts))
		}
		out = append(out, jsonValue(t, a.Parts[0].Data()))
	}
	return out
}

func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(jsonValue(t, got))
	w, _ := json.Marshal(jsonValue(t, want))
	if !bytes.Equal(g, w) {
		t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// orderTwice sends a PlaceOrder for orderID over c: its task, whose id is
// the command's correlation id, completes with an artifact per event of
// GET /events?correlationId= on base. The same order again fails its task
// with AGGREGATE_ALREADY_EXISTS, its artifacts the rejection's events.
func orderTwice(t *testing.T, c *a2aclient.Client, base, orderID string) {
	t.Helper()
	ctx := context.Background()
	env := order(orderID)
	res, err := c.SendMessage(ctx, dataMessage(env))
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage answered %T, want a task", res)
	}
	if want := envelope.CorrelationID(envelope.DefaultTenant, env["source"].(string), env["id"].(string)); string(task.ID) != want {
		t.Fatalf("task id %s, want the correlation id %s", task.ID, want)
	}
	task = awaitTerminal(t, c, task.ID)
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("task state %s, want completed", task.Status.State)
	}
	events := restEvents(t, base, a2aBootstrap, string(task.ID))
	if len(events) == 0 {
		t.Fatal("GET /events?correlationId= lists no event for the task's id")
	}
	sameJSON(t, "artifacts vs GET /events?correlationId=", artifactEnvelopes(t, task), events)

	// The same order again: rejected by the aggregate rule.
	res, err = c.SendMessage(ctx, dataMessage(order(orderID)))
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	rejected, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage answered %T, want a task", res)
	}
	rejected = awaitTerminal(t, c, rejected.ID)
	if rejected.Status.State != a2a.TaskStateFailed {
		t.Fatalf("rejected command's task: state %s, want failed", rejected.Status.State)
	}
	if m := rejected.Status.Message; m == nil || !strings.HasPrefix(m.Parts[0].Text(), "AGGREGATE_ALREADY_EXISTS") {
		t.Fatalf("failed task's status message %+v, want AGGREGATE_ALREADY_EXISTS", m)
	}
	sameJSON(t, "rejected task's artifacts", artifactEnvelopes(t, rejected), restEvents(t, base, a2aBootstrap, string(rejected.ID)))
}

// awaitTerminal reads the task until it is terminal.
func awaitTerminal(t *testing.T, c *a2aclient.Client, id a2a.TaskID) *a2a.Task {
	t.Helper()
	var task *a2a.Task
	testkit.Eventually(t, "task "+string(id)+" reaches a terminal state", func() bool {
		var err error
		task, err = c.GetTask(context.Background(), &a2a.GetTaskRequest{ID: id})
		if err != nil {
			t.Fatalf("GetTask: %v", err)
		}
		return task.Status.State.Terminal()
	})
	return task
}

// TestA2ATaskPerCommand: over the SDK's Go client, on JSON-RPC and on
// HTTP+JSON, in A2A 1.0 and 0.3, a command envelope in a data part starts a task whose id is
// the correlation id, completed with an artifact per event, equal to GET
// /events?correlationId=; a second order of the same id fails its task
// with the rejection's code; a typed skill completes the envelope.
func TestA2ATaskPerCommand(t *testing.T) {
	t.Parallel()
	s := a2aServer(t)
	for _, iface := range []struct {
		version a2a.ProtocolVersion
		binding a2a.TransportProtocol
	}{
		{a2a.Version, a2a.TransportProtocolJSONRPC}, {a2a.Version, a2a.TransportProtocolHTTPJSON},
		{a2av0.Version, a2a.TransportProtocolJSONRPC}, {a2av0.Version, a2a.TransportProtocolHTTPJSON},
	} {
		t.Run(string(iface.version)+" "+string(iface.binding), func(t *testing.T) {
			c, _ := a2aClientOf(t, s.URL, a2aBootstrap, iface.version, iface.binding)
			orderID := "ord-" + uuid.NewString()[:8]
			orderTwice(t, c, s.URL, orderID)

			// A typed skill: agentbus completes the envelope.
			typed := map[string]any{"skill": "PlaceOrder", "version": "1.0", "data": map[string]any{"orderId": "t-" + orderID, "customer": "ada",
				"items": []any{map[string]any{"sku": "tea", "quantity": 1}}}}
			res, err := c.SendMessage(context.Background(), dataMessage(typed))
			if err != nil {
				t.Fatalf("SendMessage (typed skill): %v", err)
			}
			done := awaitTerminal(t, c, res.(*a2a.Task).ID)
			if done.Status.State != a2a.TaskStateCompleted || len(done.Artifacts) != 1 || done.Artifacts[0].Name != "OrderPlaced" {
				t.Fatalf("typed skill's task: %s with %d artifacts", done.Status.State, len(done.Artifacts))
			}
		})
	}
}

// TestA2AStreamAndResubscribe: a streamed command yields its task, then
// its artifacts and its completion; resubscribing to the finished task
// yields it whole.
func TestA2AStreamAndResubscribe(t *testing.T) {
	t.Parallel()
	s := a2aServer(t)
	c, _ := a2aClient(t, s.URL, a2aBootstrap, a2a.TransportProtocolJSONRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	streamAndResubscribe(ctx, t, c, s.URL, "s-")
}

// streamAndResubscribe streams an order over c and checks it: its task,
// then its artifacts (GET /events?correlationId= of base) and its
// completion; subscribing to the finished task yields the task whole. It
// returns the task's id.
func streamAndResubscribe(ctx context.Context, t *testing.T, c *a2aclient.Client, base, prefix string) a2a.TaskID {
	t.Helper()
	var id a2a.TaskID
	var artifacts []any
	var last a2a.TaskState
	for ev, err := range c.SendStreamingMessage(ctx, dataMessage(order(prefix+uuid.NewString()[:8]))) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			id, last = e.ID, e.Status.State
			for _, a := range e.Artifacts {
				artifacts = append(artifacts, jsonValue(t, a.Parts[0].Data()))
			}
		case *a2a.TaskArtifactUpdateEvent:
			artifacts = append(artifacts, jsonValue(t, e.Artifact.Parts[0].Data()))
		case *a2a.TaskStatusUpdateEvent:
			last = e.Status.State
		default:
			t.Fatalf("unexpected stream event %T", ev)
		}
	}
	if id == "" || last != a2a.TaskStateCompleted {
		t.Fatalf("stream ended with task %q in state %s, want completed", id, last)
	}
	sameJSON(t, "streamed artifacts vs GET /events?correlationId=", artifacts, restEvents(t, base, a2aBootstrap, string(id)))

	var got []a2a.Event
	for ev, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: id}) {
		if err != nil {
			t.Fatalf("resubscribe: %v", err)
		}
		got = append(got, ev)
	}
	if len(got) != 1 {
		t.Fatalf("resubscribing to a finished task yielded %d events, want its task", len(got))
	}
	task, ok := got[0].(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) != len(artifacts) {
		t.Fatalf("resubscribe yielded %+v", got[0])
	}
	return id
}

// TestA2AValidationFailsLikeREST: a command that breaks its schema fails
// the request with REST's code and violations in the error's details, and
// nothing is queued; an unknown skill and a message without a data part
// are refused alike.
func TestA2AValidationFailsLikeREST(t *testing.T) {
	t.Parallel()
	s := a2aServer(t)
	c, _ := a2aClient(t, s.URL, a2aBootstrap, a2a.TransportProtocolJSONRPC)
	ctx := context.Background()
	bad := order("v-1")
	bad["data"] = map[string]any{"orderId": "v-1", "items": []any{map[string]any{"sku": "tea", "quantity": 0}}}
	raw, _ := json.Marshal(bad)
	status, _, restBody, err := testkit.Send(bearerClient(a2aBootstrap), http.MethodPost, s.URL+"/commands", "application/json", raw)
	if err != nil || status != http.StatusBadRequest {
		t.Fatalf("REST: %d %v", status, err)
	}
	var want struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(restBody, &want); err != nil {
		t.Fatal(err)
	}
	before := testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs

	_, err = c.SendMessage(ctx, dataMessage(bad))
	var ae *a2a.Error
	if !errors.As(err, &ae) || !errors.Is(err, a2a.ErrInvalidParams) {
		t.Fatalf("SendMessage of an invalid command: %v, want invalid params", err)
	}
	sameJSON(t, "A2A error details vs REST error body", ae.Details, want.Error)

	for name, msg := range map[string]*a2a.SendMessageRequest{
		"unknown skill": dataMessage(map[string]any{"skill": "noSuchThing", "input": map[string]any{}}),
		"text only":     {Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("place an order"))},
	} {
		_, err := c.SendMessage(ctx, msg)
		if !errors.As(err, &ae) || ae.Details["code"] != "VALIDATION_FAILED" {
			t.Fatalf("%s: %v, want VALIDATION_FAILED", name, err)
		}
	}
	after := testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs
	if after != before {
		t.Fatalf("the command log grew from %d to %d messages after refused requests", before, after)
	}
}

// TestA2ASkills: an operation is a skill answered with a message whose
// data part holds its result.
func TestA2ASkills(t *testing.T) {
	t.Parallel()
	s := a2aServer(t)
	c, card := a2aClient(t, s.URL, a2aBootstrap, a2a.TransportProtocolJSONRPC)
	for _, id := range []string{"submitCommand", "listAgents", "getTrace", "PlaceOrder"} {
		if !slices.ContainsFunc(card.Skills, func(sk a2a.AgentSkill) bool { return sk.ID == id }) {
			t.Fatalf("the card has no skill %s", id)
		}
	}
	res, err := c.SendMessage(context.Background(), dataMessage(map[string]any{"skill": "listCommandCatalog", "input": map[string]any{}}))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := res.(*a2a.Message)
	if !ok {
		t.Fatalf("a skill answered %T, want a message", res)
	}
	out, _ := m.Parts[0].Data().(map[string]any)
	result, _ := out["result"].(map[string]any)
	if out["outcome"] != "done" || result["commands"] == nil {
		t.Fatalf("listCommandCatalog answered %v", out)
	}
}

// TestA2ACredentials: the card is public and declares the bearer scheme;
// every A2A endpoint needs credentials (401), and a read-only key cannot
// submit (403 as unauthorized).
func TestA2ACredentials(t *testing.T) {
	t.Parallel()
	s := a2aServer(t)
	status, _, body, err := testkit.Send(http.DefaultClient, http.MethodGet, s.URL+"/.well-known/agent-card.json", "", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("card without credentials: %d %v", status, err)
	}
	var card map[string]any
	if err := json.Unmarshal(body, &card); err != nil {
		t.Fatal(err)
	}
	if card["securitySchemes"] == nil || card["supportedInterfaces"] == nil || card["url"] == nil {
		t.Fatalf("card lacks securitySchemes, supportedInterfaces (1.0) or url (0.3): %s", body)
	}
	rpc := []byte(`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}`)
	for _, p := range []string{"/a2a", "/a2a/v0.3", "/a2a/rest/tasks/x", "/a2a/v0.3/rest/tasks/x"} {
		method, ct, b := http.MethodPost, "application/json", rpc
		if strings.Contains(p, "/rest/") {
			method, ct, b = http.MethodGet, "", nil
		}
		status, hdr, _, err := testkit.Send(http.DefaultClient, method, s.URL+p, ct, b)
		if err != nil || status != http.StatusUnauthorized || hdr.Get("WWW-Authenticate") == "" {
			t.Fatalf("%s %s without credentials: %d %v, want 401 with a challenge", method, p, status, err)
		}
	}
	readOnly := testkit.Key(t, s, []string{"*"}, auth.ScopeRead)
	c, _ := a2aClient(t, s.URL, readOnly, a2a.TransportProtocolJSONRPC)
	testkit.Eventually(t, "the new key works", func() bool {
		_, err := c.GetTask(context.Background(), &a2a.GetTaskRequest{ID: "no-such-task"})
		return errors.Is(err, a2a.ErrTaskNotFound)
	})
	_, err = c.SendMessage(context.Background(), dataMessage(order("r-1")))
	if !errors.Is(err, a2a.ErrUnauthorized) {
		t.Fatalf("a read-only key submitting: %v, want unauthorized", err)
	}
}

// TestA2ATenantIsolation: in multi-tenant mode each tenant has its card
// and endpoints; a key of one tenant is refused on the other's, and a
// task of one tenant is not found under the other.
func TestA2ATenantIsolation(t *testing.T) {
	t.Parallel()
	s := a2aServer(t, func(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"acme", "globex"} })
	acmeKey := testkit.Key(t, s, []string{"acme"}, auth.ScopeRead, auth.ScopeWrite)
	status, _, body, err := testkit.Send(http.DefaultClient, http.MethodGet, s.URL+"/acme/.well-known/agentproto", "", nil)
	var m struct {
		A2A struct {
			AgentCard string `json:"agentCard"`
		} `json:"a2a"`
	}
	if err != nil || status != http.StatusOK || json.Unmarshal(body, &m) != nil || m.A2A.AgentCard != s.URL+"/acme/.well-known/agent-card.json" {
		t.Fatalf("acme's manifest: %d %v, a2a.agentCard %q", status, err, m.A2A.AgentCard)
	}
	acme, card := a2aClient(t, s.URL+"/acme", a2aBootstrap, a2a.TransportProtocolJSONRPC)
	if u := card.SupportedInterfaces[0].URL; u != s.URL+"/acme/a2a" {
		t.Fatalf("acme's card names %s, want %s/acme/a2a", u, s.URL)
	}
	res, err := acme.SendMessage(context.Background(), dataMessage(order("i-1")))
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*a2a.Task).ID
	for _, v := range []a2a.ProtocolVersion{a2a.Version, a2av0.Version} {
		rest, _ := a2aClientOf(t, s.URL+"/acme", a2aBootstrap, v, a2a.TransportProtocolHTTPJSON)
		if got, err := rest.GetTask(context.Background(), &a2a.GetTaskRequest{ID: id}); err != nil || got.ID != id {
			t.Fatalf("acme's task over HTTP+JSON %s: %v", v, err)
		}
	}
	globex, _ := a2aClient(t, s.URL+"/globex", a2aBootstrap, a2a.TransportProtocolJSONRPC)
	if _, err := globex.GetTask(context.Background(), &a2a.GetTaskRequest{ID: id}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("acme's task read under globex: %v, want task not found", err)
	}
	rpc := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":%q}}`, id)
	status, _, _, err = testkit.Send(bearerClient(acmeKey), http.MethodPost, s.URL+"/globex/a2a", "application/json", []byte(rpc))
	if err != nil || status != http.StatusForbidden {
		t.Fatalf("acme's key on globex's endpoint: %d %v, want 403", status, err)
	}
}

// TestA2ATaskAfterRestart: a task is read back, and resubscribed to, from
// another agentbus on the same NATS after the first one stopped.
func TestA2ATaskAfterRestart(t *testing.T) {
	t.Parallel()
	url := testkit.NATSServer(t)
	ext := func(c *settings.Config) { c.NATS.URL = url }
	first := a2aServer(t, ext)
	c, _ := a2aClient(t, first.URL, a2aBootstrap, a2a.TransportProtocolJSONRPC)
	res, err := c.SendMessage(context.Background(), dataMessage(order("rs-1")))
	if err != nil {
		t.Fatal(err)
	}
	task := awaitTerminal(t, c, res.(*a2a.Task).ID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	second := a2aServer(t, ext)
	c2, _ := a2aClient(t, second.URL, a2aBootstrap, a2a.TransportProtocolJSONRPC)
	again, err := c2.GetTask(context.Background(), &a2a.GetTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatalf("GetTask after a restart: %v", err)
	}
	sameJSON(t, "the task after a restart", again, task)
}

// TestA2AStreamFollowsLive: a task whose command waits (ShipOrder, which
// no rule handles) is followed on another replica than the one it was
// sent to: subscribing yields it submitted; once a processor's event for
// it is stored, the stream yields that event as an artifact, then the
// completion.
func TestA2AStreamFollowsLive(t *testing.T) {
	t.Parallel()
	url := testkit.NATSServer(t)
	ext := func(c *settings.Config) { c.NATS.URL = url }
	a, b := a2aServer(t, ext), a2aServer(t, ext)
	ca, _ := a2aClient(t, a.URL, a2aBootstrap, a2a.TransportProtocolJSONRPC)
	cb, _ := a2aClient(t, b.URL, a2aBootstrap, a2a.TransportProtocolJSONRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	orderID := "ship-" + uuid.NewString()[:8]
	req := dataMessage(map[string]any{"skill": "ShipOrder", "data": map[string]any{"orderId": orderID, "carrier": "dhl"}})
	req.Config = &a2a.SendMessageConfig{ReturnImmediately: true}
	res, err := ca.SendMessage(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	if task.Status.State != a2a.TaskStateSubmitted {
		t.Fatalf("a ShipOrder nobody processes: state %s, want submitted", task.Status.State)
	}
	eventID := uuid.NewString()
	var kinds []string
	for ev, err := range cb.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}) {
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			kinds = append(kinds, "task:"+string(e.Status.State))
			// A processor's event for the command, stored as the NATS
			// contract says.
			env := fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"shipper","type":"OrderShipped","datacontenttype":"application/json","time":"2026-01-01T12:00:00Z","data":{"orderId":%q}}`, eventID, orderID)
			msg := nats.NewMsg("agentbus.evt.default.order." + bus.ShardOf(orderID) + ".OrderShipped")
			msg.Header.Set("Nats-Msg-Id", eventID)
			msg.Header.Set("Agentbus-Aggregate-Id", orderID)
			msg.Header.Set("Agentbus-Correlation-Id", string(task.ID))
			msg.Header.Set("Agentbus-Command-Type", "ShipOrder")
			msg.Data = []byte(env)
			if _, err := a.Conn.JS.PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
		case *a2a.TaskArtifactUpdateEvent:
			kinds = append(kinds, "artifact:"+string(e.Artifact.ID))
		case *a2a.TaskStatusUpdateEvent:
			kinds = append(kinds, "status:"+string(e.Status.State))
		}
	}
	want := []string{"task:" + string(a2a.TaskStateSubmitted), "artifact:" + eventID, "status:" + string(a2a.TaskStateCompleted)}
	if !slices.Equal(kinds, want) {
		t.Fatalf("the stream yielded %v, want %v", kinds, want)
	}
}

// TestA2AStreamEndsWhenItsKeyIsRevoked: a task stream of a command nobody
// processes goes on while its key holds, and ends with an error at its
// next check (push.recheck) once the key is revoked.
func TestA2AStreamEndsWhenItsKeyIsRevoked(t *testing.T) {
	t.Parallel()
	s := a2aServer(t, func(c *settings.Config) { c.Push.Recheck = settings.Duration(time.Second) })
	keys, _ := testkit.Keys(t, s)
	key, rec, err := keys.Create(context.Background(), auth.NewKeyRequest{Tenants: []string{"default"}, Scopes: []auth.Scope{auth.ScopeRead, auth.ScopeWrite}})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := a2aClient(t, s.URL, key, a2a.TransportProtocolJSONRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := dataMessage(map[string]any{"skill": "ShipOrder", "data": map[string]any{"orderId": "rv-" + uuid.NewString()[:8], "carrier": "dhl"}})
	var got []a2a.Event
	var end error
	for ev, err := range c.SendStreamingMessage(ctx, req) {
		if err != nil {
			end = err
			break
		}
		got = append(got, ev)
		if len(got) == 1 {
			if _, err := keys.Revoke(context.Background(), rec.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	var ae *a2a.Error
	if len(got) == 0 || ctx.Err() != nil || !errors.As(end, &ae) || ae.Details["code"] != "UNAUTHENTICATED" {
		t.Fatalf("the stream after its key was revoked: %d events, ended by %v (ctx %v)", len(got), end, ctx.Err())
	}
}

// TestA2AStreamOfAnExpiredTokenEndsAtItsExpiry: a task stream of a bearer
// token ends with UNAUTHENTICATED at the token's exp, not at a later
// check: the stream opens so that a poll of its trace (every 2 s from the
// stream's start) falls shortly before the expiry, and push.recheck
// (15 s) is far off. (A task's events end its stream: its command is then
// done, so a task stream is never busy for long.)
func TestA2AStreamOfAnExpiredTokenEndsAtItsExpiry(t *testing.T) {
	t.Parallel()
	const signing = "a2a-interop-token-signing-key-0123456789"
	s := a2aServer(t, func(c *settings.Config) { c.Auth.TokenSigningKey = signing })
	keys, _ := testkit.Keys(t, s)
	_, rec, err := keys.Create(context.Background(), auth.NewKeyRequest{Tenants: []string{"default"}, Scopes: []auth.Scope{auth.ScopeRead, auth.ScopeWrite}})
	if err != nil {
		t.Fatal(err)
	}
	token, exp, err := bearer.New([]byte(signing), s.URL, 8*time.Second, time.Now, nil).Issue(rec.ID, []string{"default"}, "read write", "")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := a2aClient(t, s.URL, token, a2a.TransportProtocolJSONRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	time.Sleep(time.Until(exp.Add(-4500 * time.Millisecond)))
	req := dataMessage(map[string]any{"skill": "ShipOrder", "data": map[string]any{"orderId": "exp-" + uuid.NewString()[:8], "carrier": "dhl"}})
	var got []a2a.Event
	var end error
	for ev, err := range c.SendStreamingMessage(ctx, req) {
		if err != nil {
			end = err
			break
		}
		got = append(got, ev)
	}
	at := time.Now()
	var ae *a2a.Error
	if len(got) == 0 || !errors.As(end, &ae) || ae.Details["code"] != "UNAUTHENTICATED" {
		t.Fatalf("the stream of an expired token: %d events, ended by %v", len(got), end)
	}
	if at.Before(exp) || at.After(exp.Add(time.Second)) {
		t.Fatalf("the stream ended at %s, its token expired at %s", at.Format(time.RFC3339Nano), exp.Format(time.RFC3339Nano))
	}
}
