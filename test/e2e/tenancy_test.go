package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// tnSetup runs a multi-tenant agentbus (tenants a and b, bearer keys) and
// returns it with a read-write key for each tenant.
func tnSetup(t *testing.T, mutate ...func(*settings.Config)) (s *server.Server, keyA, keyB string) {
	t.Helper()
	s = auStart(t, "bearer", append([]func(*settings.Config){auMulti("a", "b"), func(c *settings.Config) {
		c.Catalog.Dirs = []string{"../../config/catalog"}
	}}, mutate...)...)
	keys := auKeys(t, s)
	keyA, _ = auMint(t, keys, "a", auth.ScopeRead, auth.ScopeWrite)
	keyB, _ = auMint(t, keys, "b", auth.ScopeRead, auth.ScopeWrite)
	return s, keyA, keyB
}

var pathParamRE = regexp.MustCompile(`\{[A-Za-z0-9_]+\}`)

// TestTenantCannotReachAnotherTenantsRoutes: a tenant-a credential is
// refused (403) on every route of tenant b, whatever the method, path
// parameters, query parameters or body, and b's data stays unchanged.
func TestTenantCannotReachAnotherTenantsRoutes(t *testing.T) {
	t.Parallel()
	s, keyA, keyB := tnSetup(t, func(c *settings.Config) { c.Events.AllowInjection = true })
	adminA, _ := auMint(t, auKeys(t, s), "a", auth.AllScopes...)
	corrB := postAs(t, s.URL+"/b/commands", keyB, placeOrder("o-b-1"))
	eventsOfAs(t, s.URL+"/b", keyB, corrB, 1)

	ops := s.Endpoints
	if len(ops) < 5 {
		t.Fatalf("only %d operations", len(ops))
	}
	for _, op := range ops {
		path := pathParamRE.ReplaceAllStringFunc(op.Path, func(p string) string {
			switch p {
			case "{schema}":
				return "place-order"
			case "{version}":
				return "1.0"
			}
			return corrB // an id of tenant b (its command's correlation id)
		})
		q := url.Values{}
		for _, p := range op.QueryParams() {
			q.Set(p.Name, map[string]string{"correlationId": corrB, "type": "OrderPlaced", "limit": "10", "view": "catalog", "synthetic": "true"}[p.Name])
		}
		var body []byte
		if op.Body != nil {
			body = plJSON(t, placeOrder("o-from-a"))
		}
		for _, cred := range []string{keyA, adminA} {
			for _, u := range []string{s.URL + "/b" + path, s.URL + "/b" + path + "?" + q.Encode()} {
				r := auCall(t, "bearer", op.Method, u, cred, body)
				auExpect(t, op.ID+" "+op.Method+" "+u, r, 403, "FORBIDDEN")
				if strings.Contains(string(r.Body), "OrderPlaced") || strings.Contains(string(r.Body), "o-b-1") {
					t.Fatalf("%s: the refusal shows tenant b's data: %s", op.ID, r.Body)
				}
			}
		}
	}
	// Tenant b's log is untouched: only its own command's event.
	evs := auEvents(t, auCall(t, "bearer", "GET", s.URL+"/b/events", keyB, nil))
	if len(evs) != 1 || evs[0]["type"] != "OrderPlaced" {
		t.Fatalf("tenant b's events changed: %v", evs)
	}
}

// TestTenantEventsAndCommandsIsolated: each tenant sees only its own events
// by every read path (log, type filter, correlation id), and its
// commands and events are on its own NATS subjects.
func TestTenantEventsAndCommandsIsolated(t *testing.T) {
	t.Parallel()
	s, keyA, keyB := tnSetup(t)
	corrA := postAs(t, s.URL+"/a/commands", keyA, placeOrder("o-a"))
	corrB := postAs(t, s.URL+"/b/commands", keyB, placeOrder("o-b"))
	eventsOfAs(t, s.URL+"/a", keyA, corrA, 1)
	eventsOfAs(t, s.URL+"/b", keyB, corrB, 1)
	// The same envelope sent to both tenants is two commands, not a duplicate.
	same := placeOrder("o-same")
	cA := postAs(t, s.URL+"/a/commands", keyA, same)
	cB := postAs(t, s.URL+"/b/commands", keyB, same)
	if cA == cB {
		t.Fatal("the same envelope got the same correlation id in two tenants")
	}
	eventsOfAs(t, s.URL+"/a", keyA, cA, 1)
	eventsOfAs(t, s.URL+"/b", keyB, cB, 1)

	orders := func(evs []map[string]any) []string {
		var out []string
		for _, e := range evs {
			if d, ok := e["data"].(map[string]any); ok {
				out = append(out, d["orderId"].(string))
			}
		}
		slices.Sort(out)
		return out
	}
	reads := map[string]string{
		"log":            "/events",
		"type filter":    "/events?type=OrderPlaced",
		"from the start": "/events?after=0&limit=1000",
	}
	for name, q := range reads {
		got := orders(auEvents(t, auCall(t, "bearer", "GET", s.URL+"/a"+q, keyA, nil)))
		for _, o := range got {
			if o == "o-b" {
				t.Fatalf("%s: tenant a sees tenant b's event: %v", name, got)
			}
		}
		if !slices.Equal(got, []string{"o-a", "o-same"}) {
			t.Fatalf("%s: tenant a sees %v", name, got)
		}
	}
	if evs := auEvents(t, auCall(t, "bearer", "GET", s.URL+"/a/events?correlationId="+corrB, keyA, nil)); len(evs) != 0 {
		t.Fatalf("tenant a reads b's command by correlation id: %v", evs)
	}
	if evs := auEvents(t, auCall(t, "bearer", "GET", s.URL+"/a/events?correlationId="+corrA, keyA, nil)); len(evs) != 1 {
		t.Fatalf("tenant a's own correlation lookup: %v", evs)
	}

	// Down to the NATS subjects.
	ctx := context.Background()
	cmds, err := s.Conn.JS.Stream(ctx, "AGENTBUS_COMMANDS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := cmds.Info(ctx, jetstream.WithSubjectFilter("agentbus.cmd.>"))
	if err != nil {
		t.Fatal(err)
	}
	for subj := range info.State.Subjects {
		if !strings.HasPrefix(subj, "agentbus.cmd.a.") && !strings.HasPrefix(subj, "agentbus.cmd.b.") {
			t.Fatalf("command on subject %s", subj)
		}
	}
	if info.State.Subjects["agentbus.cmd.a.PlaceOrder"] != 2 || info.State.Subjects["agentbus.cmd.b.PlaceOrder"] != 2 {
		t.Fatalf("command subjects %v", info.State.Subjects)
	}
	evts, err := s.Conn.JS.Stream(ctx, "AGENTBUS_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"a", "b"} {
		m, err := evts.GetLastMsgForSubject(ctx, "agentbus.evt."+tn+".>")
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Data map[string]any `json:"data"`
		}
		_ = json.Unmarshal(m.Data, &env)
		if env.Data["orderId"] != "o-same" {
			t.Fatalf("last event on agentbus.evt.%s.>: %s", tn, m.Data)
		}
	}
}

// TestTenantRegistriesIsolated: agents, services and traces of tenant b
// are invisible and untouchable from tenant a, whose namespace is its own
// (the same id registers in both).
func TestTenantRegistriesIsolated(t *testing.T) {
	t.Parallel()
	s, keyA, keyB := tnSetup(t)
	have := map[string]bool{}
	for _, op := range s.Endpoints {
		have[op.ID] = true
	}
	for _, op := range []string{"registerAgent", "registerService", "getTrace"} {
		if !have[op] {
			t.Fatalf("operation %s is not in the operation table: this test checks its tenant isolation", op)
		}
	}
	reg := func(base, key, kind, id string) {
		t.Helper()
		r := auCall(t, "bearer", "POST", base+"/"+kind, key, plJSON(t, map[string]any{"id": id, "name": id}))
		auExpect(t, "register "+kind+" "+id, r, 201, "")
	}
	a, b := s.URL+"/a", s.URL+"/b"
	reg(b, keyB, "agents", "shared")
	reg(b, keyB, "services", "shared")
	corrB := postAs(t, b+"/commands", keyB, placeOrder("o-trace-b"))
	eventsOfAs(t, b, keyB, corrB, 1)

	// Not visible from a.
	for _, kind := range []string{"agents", "services"} {
		r := auCall(t, "bearer", "GET", a+"/"+kind, keyA, nil)
		auExpect(t, "list "+kind, r, 200, "")
		if strings.Contains(string(r.Body), "shared") {
			t.Fatalf("tenant a lists b's %s: %s", kind, r.Body)
		}
	}
	auExpect(t, "get b's agent", auCall(t, "bearer", "GET", a+"/agents/shared", keyA, nil), 404, "AGENT_NOT_FOUND")
	auExpect(t, "get b's service", auCall(t, "bearer", "GET", a+"/services/shared", keyA, nil), 404, "SERVICE_NOT_FOUND")
	auExpect(t, "get b's trace", auCall(t, "bearer", "GET", a+"/traces/"+corrB, keyA, nil), 404, "TRACE_NOT_FOUND")
	// Not affected from a.
	for _, c := range []struct{ method, path string }{
		{"POST", "/agents/shared/pause"}, {"DELETE", "/agents/shared"}, {"DELETE", "/services/shared"},
	} {
		r := auCall(t, "bearer", c.method, a+c.path, keyA, nil)
		if r.Status < 400 {
			t.Fatalf("%s %s from tenant a: %d %s", c.method, c.path, r.Status, r.Body)
		}
	}
	r := auCall(t, "bearer", "GET", b+"/agents/shared", keyB, nil)
	auExpect(t, "b's agent after a's attempts", r, 200, "")
	if r.JSON(t)["status"] != "active" {
		t.Fatalf("b's agent changed: %s", r.Body)
	}
	auExpect(t, "b's service after a's attempts", auCall(t, "bearer", "GET", b+"/services/shared", keyB, nil), 200, "")
	// a's namespace is its own: the same ids register there.
	reg(a, keyA, "agents", "shared")
	reg(a, keyA, "services", "shared")
}

// TestTenantRouting: unknown tenants are errors unless open tenant creation
// is allowed; ids are validated; the manifest declares the tenant segment
// and serves a per-tenant manifest without credentials.
func TestTenantRouting(t *testing.T) {
	t.Parallel()
	s, keyA, _ := tnSetup(t)
	auExpect(t, "unknown tenant", auCall(t, "bearer", "GET", s.URL+"/zz/events", auBootstrap, nil), 404, "TENANT_NOT_FOUND")
	auExpect(t, "invalid tenant id", auCall(t, "bearer", "GET", s.URL+"/Bad_Tenant/events", auBootstrap, nil), 400, "VALIDATION_FAILED")
	auExpect(t, "a's key on an unknown tenant", auCall(t, "bearer", "GET", s.URL+"/zz/events", keyA, nil), 403, "FORBIDDEN")
	auExpect(t, "no tenant segment", auCall(t, "bearer", "GET", s.URL+"/events", keyA, nil), 404, "")
	auExpect(t, "no credential", auCall(t, "bearer", "GET", s.URL+"/a/events", "", nil), 401, "UNAUTHENTICATED")

	m := get(t, s.URL+"/.well-known/agentproto").JSON(t)
	ten := m["tenants"].(map[string]any)
	if ten["manifest"] != s.URL+"/{tenantId}/.well-known/agentproto" {
		t.Fatalf("tenants %v", ten)
	}
	for name, c := range m["capabilities"].(map[string]any) {
		for _, ep := range c.(map[string]any)["endpoints"].([]any) {
			e := ep.(map[string]any)
			if !strings.HasPrefix(e["path"].(string), "/{tenantId}/") || e["tenantScoped"] != true {
				t.Fatalf("%s endpoint without the tenant segment: %v", name, e)
			}
		}
	}
	tm := get(t, s.URL+"/a/.well-known/agentproto")
	auExpect(t, "tenant manifest", tm, 200, "")
	if !strings.Contains(string(tm.Body), `"/a/events"`) || strings.Contains(string(tm.Body), "{tenantId}/events") {
		t.Fatalf("tenant manifest: %s", tm.Body)
	}
	// Public, so it does not tell whether a tenant exists: an unknown
	// tenant's manifest looks like any other's.
	unknown := get(t, s.URL+"/zz/.well-known/agentproto")
	auExpect(t, "unknown tenant's manifest", unknown, 200, "")
	if !strings.Contains(string(unknown.Body), `"/zz/events"`) {
		t.Fatalf("unknown tenant's manifest: %s", unknown.Body)
	}
	auExpect(t, "invalid tenant id's manifest", get(t, s.URL+"/Bad_Tenant/.well-known/agentproto"), 400, "VALIDATION_FAILED")
	// Without credentials every route tells anyway: a clear 404.
	noAuth := auStart(t, "none", auMulti("a"))
	auExpect(t, "unknown tenant's manifest, auth none", get(t, noAuth.URL+"/zz/.well-known/agentproto"), 404, "TENANT_NOT_FOUND")
	doc := get(t, s.URL+"/openapi.json").JSON(t)
	if doc["paths"].(map[string]any)["/{tenantId}/events"] == nil {
		t.Fatal("OpenAPI paths lack the tenant segment")
	}

	open := auStart(t, "bearer", auMulti(), func(c *settings.Config) { c.Tenancy.Open = true })
	auExpect(t, "open tenants", auCall(t, "bearer", "GET", open.URL+"/fresh-tenant/events", auBootstrap, nil), 200, "")
}

// TestSingleTenantKeepsPlainRoutes: single mode has no tenant segment;
// its tenant is "default", and keys name it.
func TestSingleTenantKeepsPlainRoutes(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer")
	key, _ := auMint(t, auKeys(t, s), "default", auth.ScopeRead)
	auExpect(t, "plain route", auCall(t, "bearer", "GET", s.URL+"/events", key, nil), 200, "")
	auExpect(t, "tenant segment", auCall(t, "bearer", "GET", s.URL+"/default/events", key, nil), 404, "ROUTE_NOT_FOUND")
	m := get(t, s.URL+"/.well-known/agentproto").JSON(t)
	if m["tenants"].(map[string]any)["mode"] != "single" {
		t.Fatalf("tenants %v", m["tenants"])
	}
}

// postAs submits a command with a bearer credential and returns its id.
func postAs(t *testing.T, url, cred string, env map[string]any) string {
	t.Helper()
	r := auCall(t, "bearer", "POST", url, cred, plJSON(t, env))
	auExpect(t, "submit", r, 202, "")
	return r.JSON(t)["id"].(string)
}

// eventsOfAs waits for want events of a command, reading as cred.
func eventsOfAs(t *testing.T, base, cred, corr string, want int) []map[string]any {
	t.Helper()
	var evs []map[string]any
	testkit.Eventually(t, "events of "+corr, func() bool {
		evs = auEvents(t, auCall(t, "bearer", "GET", base+"/events?correlationId="+corr, cred, nil))
		return len(evs) >= want
	})
	return evs
}

// TestTenantlessRouteHint: in multi-tenant mode a resource route without
// its tenant answers ROUTE_NOT_FOUND naming the /{tenantId} prefix.
func TestTenantlessRouteHint(t *testing.T) {
	t.Parallel()
	s := auStart(t, "none", auMulti("acme"))
	for _, c := range []struct{ method, path string }{{"GET", "/agents"}, {"GET", "/events"}, {"POST", "/commands"}, {"GET", "/traces/x"}} {
		r := do(t, c.method, s.URL+c.path, "application/json", []byte(`{}`))
		b := plError(t, r, 404, "ROUTE_NOT_FOUND")
		if want := "every resource route starts with /{tenantId}, e.g. " + c.method + " /acme" + c.path; !strings.Contains(b.Message, want) {
			t.Errorf("%s %s: %q lacks %q", c.method, c.path, b.Message, want)
		}
		if b.Details["route"] != "/{tenantId}"+c.path {
			t.Errorf("%s %s: details %v", c.method, c.path, b.Details)
		}
	}
	if r := get(t, s.URL+"/acme/agents"); r.Status != 200 {
		t.Errorf("GET /acme/agents: %d %s", r.Status, r.Body)
	}
}

// tnPage is one page of events as a tenant reads it.
type tnPage struct {
	Events []map[string]any `json:"events"`
	Next   string           `json:"next"`
}

// tnList reads base+q with key and fails t unless it is a page.
func tnList(t *testing.T, base, key, q string) tnPage {
	t.Helper()
	r := auCall(t, "bearer", "GET", base+q, key, nil)
	auExpect(t, "GET "+q, r, 200, "")
	var p tnPage
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("GET %s: %v: %s", q, err, r.Body)
	}
	return p
}

// TestCursorsRevealNothingOfOtherTenants: what tenant a is given to resume
// its events by — a page's next, a live stream's event ids — moves only
// with a's own events and shows no position in the log shared with b:
// an empty page's next is the cursor it was asked after, before and after
// b writes (by every read path: the whole log, one type, several types);
// a's cursors are not numbers, and numbers other than 0 are not taken as
// cursors, so a can neither read nor probe how many events lie between two
// of its own; the ids a's stream sends are the cursors its pages give,
// one position one cursor.
func TestCursorsRevealNothingOfOtherTenants(t *testing.T) {
	t.Parallel()
	s, keyA, keyB := tnSetup(t)
	a, b := s.URL+"/a", s.URL+"/b"
	live := openStream(t, a+"/events?after=0", "Authorization", "Bearer "+keyA)
	order := func(base, key, id string) {
		t.Helper()
		eventsOfAs(t, base, key, postAs(t, base+"/commands", key, placeOrder(id)), 1)
	}
	order(a, keyA, "o-a1")
	first := tnList(t, a, keyA, "/events")
	if len(first.Events) != 1 {
		t.Fatalf("a's first page: %v", first.Events)
	}
	c1 := first.Next
	reads := []string{"", "&type=OrderPlaced", "&type=OrderPlaced&type=OrderShipped"}
	quiet := func(when string) {
		t.Helper()
		for _, q := range reads {
			if p := tnList(t, a, keyA, "/events?after="+c1+q); len(p.Events) != 0 || p.Next != c1 {
				t.Fatalf("%s, a's empty page after its last event (%q): %d events, next %q; want none and its own cursor %q",
					when, q, len(p.Events), p.Next, c1)
			}
		}
	}
	quiet("before b writes")
	for i := range 3 {
		order(b, keyB, fmt.Sprintf("o-b%d", i))
	}
	testkit.WaitIdle(t, s.Conn.JS, testkit.PipelineConsumers()...)
	for i := range 10 { // while the reads' indexes take b's events in
		quiet(fmt.Sprintf("after b wrote three orders (read %d)", i))
		time.Sleep(100 * time.Millisecond)
	}

	order(a, keyA, "o-a2")
	second := tnList(t, a, keyA, "/events?after="+c1)
	if len(second.Events) != 1 || second.Events[0]["data"].(map[string]any)["orderId"] != "o-a2" {
		t.Fatalf("a's page after its first event: %v", second.Events)
	}
	c2 := second.Next
	streamed := live.next(t, 2)
	if streamed[0].ID != c1 || streamed[1].ID != c2 {
		t.Fatalf("a's stream ids %q, %q; its pages' cursors %q, %q", streamed[0].ID, streamed[1].ID, c1, c2)
	}
	for _, c := range []string{c1, c2} {
		if _, err := strconv.ParseUint(c, 10, 64); err == nil {
			t.Fatalf("a's cursor %q is a number: the gap between two of them counts b's events", c)
		}
	}
	// Probing with numbers, as a would to find the gap, is refused.
	for _, n := range []string{"1", "2", "3", "5", "9"} {
		r := auCall(t, "bearer", "GET", a+"/events?after="+n, keyA, nil)
		if e := plError(t, r, 400, "VALIDATION_FAILED"); !slices.Equal(e.paths(), []string{"after"}) {
			t.Fatalf("after=%s: %s", n, r.Body)
		}
	}
}

// TestCursorOfAnotherTenantOrChangedIsRefused: a cursor of another tenant,
// one changed by a character, and one of injected events given for the
// log are refused (400 VALIDATION_FAILED naming after, or Last-Event-ID
// for a stream's resume); 0 is the start for every tenant.
func TestCursorOfAnotherTenantOrChangedIsRefused(t *testing.T) {
	t.Parallel()
	s, keyA, keyB := tnSetup(t)
	a, b := s.URL+"/a", s.URL+"/b"
	eventsOfAs(t, a, keyA, postAs(t, a+"/commands", keyA, placeOrder("o-a")), 1)
	eventsOfAs(t, b, keyB, postAs(t, b+"/commands", keyB, placeOrder("o-b")), 1)
	ca, cb := tnList(t, a, keyA, "/events?after=0").Next, tnList(t, b, keyB, "/events?after=0").Next
	if ca == "0" || cb == "0" || ca == cb {
		t.Fatalf("cursors a %q, b %q", ca, cb)
	}
	changed := []byte(ca)
	changed[5] ^= 'A' ^ 'B' // another base64url character
	if changed[5] == ca[5] {
		t.Fatal("the change changed nothing")
	}
	refused := map[string]string{"b's cursor": cb, "a changed cursor": string(changed), "a cursor cut short": ca[:len(ca)-1],
		"a cursor and more": ca + "A"}
	for what, c := range refused {
		r := auCall(t, "bearer", "GET", a+"/events?after="+url.QueryEscape(c), keyA, nil)
		if e := plError(t, r, 400, "VALIDATION_FAILED"); !slices.Equal(e.paths(), []string{"after"}) {
			t.Fatalf("%s as after: %s", what, r.Body)
		}
		res := auCall(t, "bearer", "GET", a+"/events", keyA, nil, "Accept", "text/event-stream", "Last-Event-ID", c)
		if e := plError(t, res, 400, "VALIDATION_FAILED"); !slices.Equal(e.paths(), []string{"Last-Event-ID"}) {
			t.Fatalf("%s as Last-Event-ID: %s", what, res.Body)
		}
	}
	if p := tnList(t, a, keyA, "/events?after="+ca); len(p.Events) != 0 || p.Next != ca {
		t.Fatalf("a's own cursor: %d events, next %q", len(p.Events), p.Next)
	}
	if p := tnList(t, b, keyB, "/events?after=0"); len(p.Events) != 1 || p.Next != cb {
		t.Fatalf("b from the start: %d events, next %q", len(p.Events), p.Next)
	}
}
