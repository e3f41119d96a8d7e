package e2e_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

func allowInjection(c *settings.Config) { c.Events.AllowInjection = true }

// injectCap returns the events capability of the manifest and whether it
// lists injectEvent.
func injectCap(t *testing.T, base string) (status string, listed bool) {
	t.Helper()
	ev := get(t, base+"/.well-known/agentproto").JSON(t)["capabilities"].(map[string]any)["events"].(map[string]any)
	for _, e := range ev["endpoints"].([]any) {
		if e.(map[string]any)["operation"] == "injectEvent" {
			listed = true
		}
	}
	return ev["status"].(string), listed
}

// TestInjectionOffByDefault: POST /events answers 422
// CAPABILITY_NOT_SUPPORTED to every credential, even the bootstrap key;
// the manifest's events capability is partial and the OpenAPI document
// has no POST /events.
func TestInjectionOffByDefault(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"none", "bearer"} {
		s := auStart(t, typ)
		creds := []string{""}
		if typ == "bearer" {
			rw, _ := auMint(t, auKeys(t, s), "default", auth.ScopeRead, auth.ScopeWrite)
			creds = []string{auBootstrap, rw}
		}
		for _, cred := range creds {
			r := auCall(t, typ, "POST", s.URL+"/events", cred, plJSON(t, auEvent("OrderPlaced", map[string]any{})))
			auExpect(t, typ+": inject while off", r, 422, "CAPABILITY_NOT_SUPPORTED")
		}
		if typ == "bearer" {
			auExpect(t, "inject while off, no credential", auCall(t, typ, "POST", s.URL+"/events", "", nil), 401, "UNAUTHENTICATED")
		}
		if status, listed := injectCap(t, s.URL); status != "partial" || listed {
			t.Fatalf("%s: events capability %s, injectEvent listed %v", typ, status, listed)
		}
		paths := get(t, s.URL+"/openapi.json").JSON(t)["paths"].(map[string]any)
		if paths["/events"].(map[string]any)["post"] != nil {
			t.Fatalf("%s: OpenAPI documents POST /events while it is off", typ)
		}
	}
}

// TestInjectionNeedsAdminScope: with injection on, ordinary credentials
// (read, write) get 403; only a credential with the admin scope injects.
func TestInjectionNeedsAdminScope(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer", allowInjection)
	keys := auKeys(t, s)
	rw, _ := auMint(t, keys, "default", auth.ScopeRead, auth.ScopeWrite)
	admin, adminID := auMint(t, keys, "default", auth.ScopeAdmin)
	body := plJSON(t, auEvent("OrderPlaced", map[string]any{"note": "x"}))

	if status, listed := injectCap(t, s.URL); status != "full" || !listed {
		t.Fatalf("events capability %s, injectEvent listed %v", status, listed)
	}
	r := auCall(t, "bearer", "POST", s.URL+"/events", rw, body)
	auExpect(t, "read-write key injects", r, 403, "FORBIDDEN")
	if !strings.Contains(r.Header.Get("WWW-Authenticate"), `scope="admin"`) {
		t.Fatalf("WWW-Authenticate %q", r.Header.Get("WWW-Authenticate"))
	}
	auExpect(t, "admin token injects", auCall(t, "bearer", "POST", s.URL+"/events", auToken(t, s.URL, adminID, admin, ""), body), 202, "")
	auExpect(t, "admin key injects", auCall(t, "bearer", "POST", s.URL+"/events", admin, plJSON(t, auEvent("OrderPlaced", map[string]any{}))), 202, "")
	// Admin is not above read and write: it only injects.
	auExpect(t, "admin key reads", auCall(t, "bearer", "GET", s.URL+"/events", admin, nil), 403, "FORBIDDEN")
}

// TestInjectedEventsAreSynthetic: an injected event is validated like a
// command, marked synthetic, stored apart, never delivered to consumers of
// production subjects, and absent from production reads; only
// GET /events?synthetic=true shows it.
func TestInjectedEventsAreSynthetic(t *testing.T) {
	t.Parallel()
	s := auStart(t, "apikey-header", allowInjection)
	keys := auKeys(t, s)
	rw, _ := auMint(t, keys, "default", auth.ScopeRead, auth.ScopeWrite)
	admin, _ := auMint(t, keys, "default", auth.ScopeAdmin)
	inject := func(env map[string]any) *response {
		return auCall(t, "apikey-header", "POST", s.URL+"/events", admin, plJSON(t, env))
	}

	// Validated like a command: envelope rules, and data against the
	// catalogue schema its dataschema names.
	bad := auEvent("OrderPlaced", map[string]any{})
	delete(bad, "source")
	auExpect(t, "no source", inject(bad), 400, "VALIDATION_FAILED")
	auExpect(t, "not PascalCase", inject(auEvent("order_placed", map[string]any{})), 400, "VALIDATION_FAILED")
	auExpect(t, "malformed", auCall(t, "apikey-header", "POST", s.URL+"/events", admin, []byte(`{"specversion":`)), 400, "MALFORMED_JSON")
	typed := auEvent("OrderPlaced", map[string]any{"orderId": 7})
	typed["dataschema"] = "order-placed/1.0"
	auExpect(t, "data against its schema", inject(typed), 400, "VALIDATION_FAILED")
	wrongType := auEvent("OrderCancelled", map[string]any{})
	wrongType["dataschema"] = "order-placed/1.0"
	auExpect(t, "schema of another type", inject(wrongType), 400, "VALIDATION_FAILED")
	// dataschema is a resolvable URI: a catalogue reference or an http(s) URL.
	for _, ds := range []string{"a:\r\n\r\nNats-Msg-Id: zz", "a:\u0000", "urn:x:y", "https://", "https://h/a b", "/events/order-placed/1.0",
		s.URL + "/commands/place-order/1.0", s.URL + "/events/no-such/1.0"} {
		e := auEvent("OrderPlaced", map[string]any{})
		e["dataschema"] = ds
		if r := inject(e); r.Status != 400 || !strings.Contains(string(r.Body), "$.dataschema") {
			t.Errorf("dataschema %q: %d %s", ds, r.Status, r.Body)
		}
	}

	// Watch production and synthetic subjects on NATS.
	nc := s.Conn.NC
	prod, err := nc.SubscribeSync("agentbus.evt.>")
	if err != nil {
		t.Fatal(err)
	}
	syn, err := nc.SubscribeSync("agentbus.syn.>")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prod.Unsubscribe(); _ = syn.Unsubscribe() })
	_ = nc.Flush()

	ev := auEvent("OrderPlaced", map[string]any{"orderId": "o-syn", "customer": "sim", "items": []any{map[string]any{"sku": "A-1", "quantity": 1}}})
	ev["dataschema"] = "order-placed/1.0"
	r := inject(ev)
	auExpect(t, "inject", r, 202, "")
	if r.JSON(t)["id"] != ev["id"] {
		t.Fatalf("inject answer %s", r.Body)
	}
	auExpect(t, "inject again (idempotent)", inject(ev), 202, "")

	m, err := syn.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no message on agentbus.syn.>: %v", err)
	}
	if m.Subject != "agentbus.syn.default._._.OrderPlaced" || m.Header.Get("Agentbus-Synthetic") != "true" {
		t.Fatalf("synthetic message %s %v", m.Subject, m.Header)
	}
	if _, err := prod.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatal("the injected event reached a production subject")
	}
	if n := testkit.StreamState(t, s.Conn.JS, "AGENTBUS_EVENTS").Msgs; n != 0 {
		t.Fatalf("the production event stream holds %d messages", n)
	}
	// Nothing that follows the event log took it in: not the history
	// (the correlation index), nor the consumers on the event stream.
	if _, events := s.History.Through(); events != 0 {
		t.Fatalf("the history holds the event log up to %d; want nothing", events)
	}
	for _, name := range []string{"control", "subscriptions"} {
		ci := testkit.ConsumerInfo(t, s.Conn.JS, "AGENTBUS_EVENTS", name)
		if ci == nil {
			t.Fatalf("the %s consumer is missing", name)
		}
		if ci.Delivered.Stream != 0 {
			t.Fatalf("the %s consumer was delivered %d", name, ci.Delivered.Stream)
		}
	}

	// Production reads never show it; the explicit synthetic read does.
	r = auCall(t, "apikey-header", "POST", s.URL+"/commands", rw, plJSON(t, placeOrder("o-real")))
	auExpect(t, "submit", r, 202, "")
	corr := r.JSON(t)["id"].(string)
	var real []map[string]any
	testkit.Eventually(t, "production event", func() bool {
		real = auEvents(t, auCall(t, "apikey-header", "GET", s.URL+"/events?correlationId="+corr, rw, nil))
		return len(real) == 1
	})
	for _, q := range []string{"", "?type=OrderPlaced", "?after=0", "?synthetic=false"} {
		evs := auEvents(t, auCall(t, "apikey-header", "GET", s.URL+"/events"+q, rw, nil))
		if len(evs) != 1 || evs[0]["id"] != real[0]["id"] {
			t.Fatalf("GET /events%s: %v", q, evs)
		}
	}
	synth := auEvents(t, auCall(t, "apikey-header", "GET", s.URL+"/events?synthetic=true", rw, nil))
	if len(synth) != 1 || synth[0]["id"] != ev["id"] {
		t.Fatalf("GET /events?synthetic=true: %v", synth)
	}
	// Stored with the URL agentbus serves its schema at, as its own events are.
	if ds, want := synth[0]["dataschema"], s.URL+"/events/order-placed/1.0"; ds != want {
		t.Fatalf("stored dataschema %v, want %s", ds, want)
	}
	other := auEvent("Pinged", map[string]any{})
	other["dataschema"] = "https://schemas.example.com/pinged.json"
	auExpect(t, "a schema elsewhere", inject(other), 202, "")
	synth = auEvents(t, auCall(t, "apikey-header", "GET", s.URL+"/events?synthetic=true", rw, nil))
	if len(synth) != 2 || synth[1]["dataschema"] != other["dataschema"] {
		t.Fatalf("a schema elsewhere is kept as given: %v", synth)
	}
	auExpect(t, "synthetic=maybe", auCall(t, "apikey-header", "GET", s.URL+"/events?synthetic=maybe", rw, nil), 400, "VALIDATION_FAILED")
}

// TestInjectionTenantScoped: tenants' synthetic events are apart too, and
// the same event id in two tenants is two events.
func TestInjectionTenantScoped(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer", auMulti("a", "b"), allowInjection)
	keys := auKeys(t, s)
	adminA, _ := auMint(t, keys, "a", auth.ScopeAdmin, auth.ScopeRead)
	adminB, _ := auMint(t, keys, "b", auth.ScopeAdmin, auth.ScopeRead)
	ev := plJSON(t, auEvent("Pinged", map[string]any{}))
	auExpect(t, "a injects", auCall(t, "bearer", "POST", s.URL+"/a/events", adminA, ev), 202, "")
	auExpect(t, "b injects the same id", auCall(t, "bearer", "POST", s.URL+"/b/events", adminB, ev), 202, "")
	auExpect(t, "a injects into b", auCall(t, "bearer", "POST", s.URL+"/b/events", adminA, ev), 403, "FORBIDDEN")
	// Another tenant's schema URL is not one of a's: its data would go unchecked.
	foreign := auEvent("OrderPlaced", map[string]any{"x": 1})
	foreign["dataschema"] = s.URL + "/b/events/order-placed/1.0"
	if paths := plError(t, auCall(t, "bearer", "POST", s.URL+"/a/events", adminA, plJSON(t, foreign)), 400, "VALIDATION_FAILED").paths(); !slices.Contains(paths, "$.dataschema") {
		t.Errorf("a names b's schema: violations at %v, want $.dataschema among them", paths)
	}
	for _, tn := range []struct{ path, key string }{{"/a", adminA}, {"/b", adminB}} {
		if evs := auEvents(t, auCall(t, "bearer", "GET", s.URL+tn.path+"/events?synthetic=true", tn.key, nil)); len(evs) != 1 {
			t.Fatalf("%s synthetic events: %v", tn.path, evs)
		}
	}
}

// TestInjectionWithAuthNone: with no authentication every caller has every
// scope, so the operator's switch alone decides (on loopback only).
func TestInjectionWithAuthNone(t *testing.T) {
	t.Parallel()
	s := auStart(t, "none", allowInjection)
	auExpect(t, "inject", postJSON(t, s.URL+"/events", auEvent("Pinged", map[string]any{})), 202, "")
}
