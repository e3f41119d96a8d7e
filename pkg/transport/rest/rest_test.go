package rest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/rest"
)

const endpoint = "https://bus.example.com/api"

// fixture is a REST handler over a small fake operations table that
// records what reached the operations.
type fixture struct {
	h     http.Handler
	calls atomic.Int64
	last  atomic.Pointer[ops.Request]
}

func newFixture(t *testing.T, cfg rest.Config) *fixture {
	t.Helper()
	f := &fixture{}
	record := func(r *ops.Request) { f.calls.Add(1); f.last.Store(r) }
	table := []rest.Endpoint{
		{Route: rest.Route{Method: http.MethodPost, Path: "/things"}, Operation: ops.Operation{ID: "createThing", Body: &ops.Body{Description: "a thing"}, Outcomes: []ops.Outcome{ops.Queued},
			Handle: func(_ context.Context, r *ops.Request) (*ops.Response, error) {
				record(r)
				return &ops.Response{Outcome: ops.Queued, Body: map[string]any{"size": len(r.Body)}, Location: "/things/1"}, nil
			}}},
		{Route: rest.Route{Method: http.MethodGet, Path: "/things"}, Operation: ops.Operation{ID: "listThings",
			Params: []ops.Param{{Name: "q"}, {Name: "type", Repeated: true}},
			Handle: func(_ context.Context, r *ops.Request) (*ops.Response, error) {
				record(r)
				return &ops.Response{Body: map[string]any{"query": r.Params}}, nil
			}}},
		{Route: rest.Route{Method: http.MethodGet, Path: "/things/{id}"}, Operation: ops.Operation{ID: "getThing", Params: []ops.Param{{Name: "id"}},
			Handle: func(_ context.Context, r *ops.Request) (*ops.Response, error) {
				record(r)
				switch id := r.Param("id"); id {
				case "missing":
					return nil, errs.New(errs.CodeAgentNotFound, "agent %q is not registered", id)
				case "broken":
					return nil, errs.Internal(errors.New("dial tcp 10.0.0.7:4222: secret-password rejected"))
				case "plain":
					return nil, errors.New("an error that is not an *errs.Error: secret-token")
				case "invalid":
					return nil, errs.Invalid("bad", []errs.Violation{{Path: "$.data.items.0.quantity", Message: "must be >= 1"}})
				case "limited":
					e := errs.New(errs.CodeRateLimited, "slow down")
					e.Details = map[string]any{"retryAfterSeconds": 7}
					return nil, e
				}
				return &ops.Response{Body: map[string]string{"id": r.Param("id")}}, nil
			}}},
		{Route: rest.Route{Method: http.MethodGet, Path: "/raw/{schema}/{version}"}, Operation: ops.Operation{ID: "getRaw",
			Params: []ops.Param{{Name: "schema"}, {Name: "version"}},
			Handle: func(_ context.Context, r *ops.Request) (*ops.Response, error) {
				record(r)
				return &ops.Response{Raw: []byte(`{"type":"object"}`), ContentType: "application/schema+json"}, nil
			}}},
		{Route: rest.Route{Method: http.MethodDelete, Path: "/things/{id}"}, Operation: ops.Operation{ID: "deleteThing", Params: []ops.Param{{Name: "id"}},
			Outcomes: []ops.Outcome{ops.Empty},
			Handle: func(_ context.Context, r *ops.Request) (*ops.Response, error) {
				record(r)
				return &ops.Response{Outcome: ops.Empty}, nil
			}}},
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = endpoint
	}
	f.h = rest.New(cfg, table, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return f
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func (f *fixture) do(method, target, contentType string, body io.Reader, length int64) *result {
	req := httptest.NewRequest(method, target, body)
	req.ContentLength = length
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, req)
	return &result{status: w.Code, header: w.Header(), body: w.Body.Bytes()}
}

func (f *fixture) post(target, contentType, body string) *result {
	return f.do(http.MethodPost, target, contentType, strings.NewReader(body), int64(len(body)))
}

func (f *fixture) get(target string) *result { return f.do(http.MethodGet, target, "", nil, 0) }

// errorBody checks r is the spec's error body with status and code and
// returns it.
func errorBody(t *testing.T, r *result, status int, code errs.Code) *errs.Body {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type = %q", ct)
	}
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &raw); err != nil || len(raw) != 1 || raw["error"] == nil {
		t.Fatalf("not an error body: %s", r.body)
	}
	for _, k := range []string{"code", "message", "details"} {
		if _, ok := raw["error"][k]; !ok {
			t.Errorf("error body lacks error.%s: %s", k, r.body)
		}
	}
	var b errs.Body
	_ = json.Unmarshal(r.body, &b)
	if b.Error.Code != code || b.Error.Message == "" || b.Error.Details == nil {
		t.Errorf("error = %+v, want code %s with a message and details", b.Error, code)
	}
	return &b
}

func violationPaths(b *errs.Body) []string {
	vs, _ := b.Error.Details["violations"].([]any)
	var out []string
	for _, v := range vs {
		m, _ := v.(map[string]any)
		p, _ := m["path"].(string)
		out = append(out, p)
	}
	return out
}

func TestRoutingErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rest.Config{})
	tests := []struct {
		name, method, target string
		status               int
		code                 errs.Code
	}{
		{"unknown route", http.MethodGet, "/nope", 404, errs.CodeRouteNotFound},
		{"unknown nested route", http.MethodGet, "/things/1/more", 404, errs.CodeRouteNotFound},
		{"extra segment after the last parameter", http.MethodGet, "/raw/a/1.0/x", 404, errs.CodeRouteNotFound},
		{"extra segments after an id", http.MethodDelete, "/things/1/2/3", 404, errs.CodeRouteNotFound},
		{"root", http.MethodGet, "/", 404, errs.CodeRouteNotFound},
		{"wrong method on a collection", http.MethodPut, "/things", 405, errs.CodeMethodNotAllowed},
		{"wrong method on an item", http.MethodPost, "/things/1", 405, errs.CodeMethodNotAllowed},
		{"PATCH", http.MethodPatch, "/raw/a/1.0", 405, errs.CodeMethodNotAllowed},
		// A path no route has is a 404 whatever the method.
		{"wrong method, extra segment", http.MethodPut, "/things/a/b", 404, errs.CodeRouteNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			errorBody(t, f.do(tt.method, tt.target, "application/json", strings.NewReader("{}"), 2), tt.status, tt.code)
		})
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("%d operations were called", n)
	}
}

// TestPathParametersDecoded: a percent-encoded path parameter reaches the
// operation decoded, as the same path written plainly does.
func TestPathParametersDecoded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rest.Config{})
	for target, want := range map[string]string{"/things/abc": "abc", "/things/%61bc": "abc", "/things/a%20b": "a b", "/things/caf%C3%A9": "café",
		"/things/a%25": "a%", "/things/a%2541": "a%41", "/things/a%25b": "a%b"} { // decoded once, never twice
		if r := f.get(target); r.status != 200 || f.last.Load().Param("id") != want {
			t.Errorf("GET %s: %d, id %q, want %q", target, r.status, f.last.Load().Param("id"), want)
		}
	}
	// A request line net/url would not parse, as a raw client can send it.
	req := httptest.NewRequest(http.MethodGet, "/things/x", nil)
	req.URL.Path, req.URL.RawPath = "/things/a%zz", "/things/a%zz"
	w := httptest.NewRecorder()
	calls := f.calls.Load()
	f.h.ServeHTTP(w, req)
	errorBody(t, &result{status: w.Code, header: w.Header(), body: w.Body.Bytes()}, 400, errs.CodeValidationFailed)
	if f.calls.Load() != calls {
		t.Error("the operation was called")
	}
}

// TestHeadOnEveryGet: every GET route answers HEAD with its status and
// headers and no body; HEAD is among the methods a 405 allows.
func TestHeadOnEveryGet(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rest.Config{})
	srv := httptest.NewServer(f.h) // a real server: it drops HEAD bodies
	t.Cleanup(srv.Close)
	for target, status := range map[string]int{"/things": 200, "/things/1": 200, "/raw/a/1.0": 200, "/things/missing": 404, "/nope": 404} {
		req, _ := http.NewRequest(http.MethodHead, srv.URL+target, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != status || len(body) != 0 {
			t.Errorf("HEAD %s: %d with %d body bytes, want %d and none", target, resp.StatusCode, len(body), status)
		}
	}
	r := f.do(http.MethodPut, "/things/1", "application/json", strings.NewReader("{}"), 2)
	errorBody(t, r, 405, errs.CodeMethodNotAllowed)
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "HEAD") || !strings.Contains(allow, "GET") {
		t.Errorf("Allow %q", allow)
	}
}

func TestUnknownQueryParameter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rest.Config{AllowQuery: []string{"api_key"}})
	b := errorBody(t, f.get("/things?q=1&bogus=2&other"), 400, errs.CodeValidationFailed)
	paths := violationPaths(b)
	if len(paths) != 2 || !contains(paths, "bogus") || !contains(paths, "other") {
		t.Errorf("violations %q, want bogus and other", paths)
	}
	if f.calls.Load() != 0 {
		t.Error("the operation ran despite a bad query")
	}
	if r := f.get("/things?q=1&type=A&type=B&api_key=k"); r.status != 200 {
		t.Fatalf("known parameters: %d %s", r.status, r.body)
	}
	if got := f.last.Load().Params["type"]; len(got) != 2 {
		t.Errorf("repeated parameter = %q", got)
	}
	if q := f.last.Load().Params; q["api_key"] != nil || len(q) != 2 {
		t.Errorf("the operation saw %v: the allowed api_key must not reach it", q)
	}
	// A body-taking operation rejects unknown parameters before reading
	// the body.
	errorBody(t, f.post("/things?x=1", "application/json", `{}`), 400, errs.CodeValidationFailed)
	if f.calls.Load() != 1 {
		t.Errorf("calls = %d, want 1", f.calls.Load())
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestBodyMediaType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, contentType string
		ok                bool
	}{
		{"json", "application/json", true},
		{"json utf-8", "application/json; charset=utf-8", true},
		{"json UTF-8 upper", "application/json; charset=UTF-8", true},
		{"type in capitals", "Application/JSON", true},
		{"missing", "", false},
		{"text/plain", "text/plain", false},
		{"form", "application/x-www-form-urlencoded", false},
		{"json suffix", "application/cloudevents+json", false},
		{"latin-1", "application/json; charset=iso-8859-1", false},
		{"unparsable", "application/json; charset", false},
		{"garbage", ";;;", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, rest.Config{})
			r := f.post("/things", tt.contentType, `{"a":1}`)
			if tt.ok {
				if r.status != 202 || f.calls.Load() != 1 {
					t.Fatalf("status %d calls %d: %s", r.status, f.calls.Load(), r.body)
				}
				return
			}
			errorBody(t, r, 415, errs.CodeUnsupportedMediaType)
			if f.calls.Load() != 0 {
				t.Error("the operation ran")
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	const limit = 2048
	body := func(n int) string { return `{"a":"` + strings.Repeat("x", n-8) + `"}` }
	tests := []struct {
		name    string
		size    int
		chunked bool // no Content-Length: the limit applies while reading
		ok      bool
	}{
		{"at the limit", limit, false, true},
		{"at the limit, chunked", limit, true, true},
		{"one byte over", limit + 1, false, false},
		{"one byte over, chunked", limit + 1, true, false},
		{"far over", 10 * limit, false, false},
		{"far over, chunked", 10 * limit, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, rest.Config{BodyLimit: limit})
			b := body(tt.size)
			if len(b) != tt.size {
				t.Fatalf("body is %d bytes", len(b))
			}
			length := int64(len(b))
			if tt.chunked {
				length = -1
			}
			r := f.do(http.MethodPost, "/things", "application/json", strings.NewReader(b), length)
			if tt.ok {
				if r.status != 202 {
					t.Fatalf("status %d: %s", r.status, r.body)
				}
				var got struct{ Size int }
				_ = json.Unmarshal(r.body, &got)
				if got.Size != tt.size {
					t.Errorf("operation saw %d bytes, want %d", got.Size, tt.size)
				}
				return
			}
			eb := errorBody(t, r, 413, errs.CodePayloadTooLarge)
			if eb.Error.Details["limit"] != float64(limit) {
				t.Errorf("details = %v, want limit %d", eb.Error.Details, limit)
			}
			if f.calls.Load() != 0 {
				t.Error("the operation ran")
			}
		})
	}
	t.Run("default is 1 MiB", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, rest.Config{})
		if r := f.post("/things", "application/json", body(1<<20)); r.status != 202 {
			t.Errorf("1 MiB: %d", r.status)
		}
		errorBody(t, f.post("/things", "application/json", body(1<<20+1)), 413, errs.CodePayloadTooLarge)
	})
}

// TestLargeDeclaredBody: bodies over the up-front allocation are read
// whole; a short one is a 400.
func TestLargeDeclaredBody(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rest.Config{})
	for _, n := range []int{64 << 10, 64<<10 + 1, 300 << 10, 1 << 20} {
		b := `{"a":"` + strings.Repeat("x", n-8) + `"}`
		r := f.post("/things", "application/json", b)
		var got struct{ Size int }
		_ = json.Unmarshal(r.body, &got)
		if r.status != 202 || got.Size != n {
			t.Fatalf("%d bytes: %d, operation saw %d", n, r.status, got.Size)
		}
	}
	short := `{"a":"` + strings.Repeat("x", 100<<10) + `"}`
	errorBody(t, f.do(http.MethodPost, "/things", "application/json", strings.NewReader(short), 300<<10), 400, errs.CodeInvalidRequest)
}

// stalled is a body that sends a few bytes and then fails, as a client
// that declared a large body and went away.
type stalled struct{ sent bool }

func (s *stalled) Read(p []byte) (int, error) {
	if s.sent {
		return 0, io.ErrUnexpectedEOF
	}
	s.sent = true
	return copy(p, `{"a":`), nil
}

// TestDeclaredLengthNotAllocatedUpfront: a declared 1 MiB body that never
// comes costs far less than 1 MiB. Not parallel: it measures the heap.
func TestDeclaredLengthNotAllocatedUpfront(t *testing.T) {
	f := newFixture(t, rest.Config{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const requests = 8
	for range requests {
		errorBody(t, f.do(http.MethodPost, "/things", "application/json", &stalled{}, 1<<20), 400, errs.CodeInvalidRequest)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / requests; per > 256<<10 {
		t.Fatalf("%d bytes allocated per request declaring 1 MiB", per)
	}
}

func TestOperationErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rest.Config{})
	t.Run("not found", func(t *testing.T) {
		errorBody(t, f.get("/things/missing"), 404, errs.CodeAgentNotFound)
	})
	t.Run("violations listed with their paths", func(t *testing.T) {
		b := errorBody(t, f.get("/things/invalid"), 400, errs.CodeValidationFailed)
		if p := violationPaths(b); len(p) != 1 || p[0] != "$.data.items.0.quantity" {
			t.Errorf("violations %q", p)
		}
	})
	for _, id := range []string{"broken", "plain"} {
		t.Run("internal error hides its cause: "+id, func(t *testing.T) {
			r := f.get("/things/" + id)
			errorBody(t, r, 500, errs.CodeInternal)
			if bytes.Contains(r.body, []byte("secret")) || bytes.Contains(r.body, []byte("10.0.0.7")) {
				t.Errorf("internal details leaked: %s", r.body)
			}
		})
	}
	t.Run("rate limited carries Retry-After", func(t *testing.T) {
		r := f.get("/things/limited")
		errorBody(t, r, 429, errs.CodeRateLimited)
		if got := r.header.Get("Retry-After"); got != "7" {
			t.Errorf("Retry-After = %q", got)
		}
	})
	t.Run("HEAD error has no body", func(t *testing.T) {
		r := f.do(http.MethodHead, "/nope", "", nil, 0)
		if r.status != 404 || len(r.body) != 0 {
			t.Errorf("HEAD: %d %q", r.status, r.body)
		}
	})
}

func TestSuccessResponses(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rest.Config{})
	r := f.post("/things", "application/json", `{}`)
	if r.status != 202 || r.header.Get("Location") != endpoint+"/things/1" {
		t.Errorf("POST: %d Location %q", r.status, r.header.Get("Location"))
	}
	r = f.get("/raw/order-placed/1.0")
	if r.status != 200 || r.header.Get("Content-Type") != "application/schema+json" || string(r.body) != `{"type":"object"}` {
		t.Errorf("raw: %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	if p := f.last.Load(); p.Param("schema") != "order-placed" || p.Param("version") != "1.0" {
		t.Errorf("path parameters %v", p)
	}
	if f.last.Load().Tenant != "default" {
		t.Errorf("single-tenant tenant = %q", f.last.Load().Tenant)
	}
	r = f.do(http.MethodDelete, "/things/9", "", nil, 0)
	if r.status != 204 || len(r.body) != 0 {
		t.Errorf("DELETE: %d %q", r.status, r.body)
	}
	r = f.get("/things/abc")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Errorf("GET: %d %q", r.status, r.header.Get("Content-Type"))
	}
}

func TestMultiTenant(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rest.Config{MultiTenant: true,
		Tenants: func(_ context.Context, t string) bool { return t == "acme" || t == "globex" }})
	tests := []struct {
		name, target string
		status       int
		code         errs.Code
	}{
		{"unknown tenant", "/initech/things/1", 404, errs.CodeTenantNotFound},
		{"invalid tenant", "/Acme_Corp/things/1", 400, errs.CodeValidationFailed},
		{"no tenant segment", "/things/1", 404, errs.CodeRouteNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errorBody(t, f.get(tt.target), tt.status, tt.code)
		})
	}
	if f.calls.Load() != 0 {
		t.Fatalf("%d operations ran for bad tenants", f.calls.Load())
	}
	r := f.post("/acme/things", "application/json", `{}`)
	if r.status != 202 || f.last.Load().Tenant != "acme" {
		t.Fatalf("acme: %d tenant %q", r.status, f.last.Load().Tenant)
	}
	if loc := r.header.Get("Location"); loc != endpoint+"/acme/things/1" {
		t.Errorf("Location = %q, want the tenant's path on rest.endpoint", loc)
	}
	if r := f.get("/globex/things/x"); r.status != 200 || f.last.Load().Tenant != "globex" || f.last.Load().Param("id") != "x" {
		t.Errorf("globex: %d %+v", r.status, f.last.Load())
	}
	if _, ok := f.last.Load().Params["tenantId"]; ok {
		t.Error("tenantId leaked into the operation's path parameters")
	}
}

// TestMultiTenantRouteHint: in multi-tenant mode a resource route without
// its tenant ("/things") is a ROUTE_NOT_FOUND that names the /{tenantId}
// prefix, in the message and the details; a path that is no resource's
// gets no hint, nor does the same path in single-tenant mode.
func TestMultiTenantRouteHint(t *testing.T) {
	t.Parallel()
	multi := newFixture(t, rest.Config{MultiTenant: true})
	for _, tt := range []struct{ method, target, route string }{
		{http.MethodGet, "/things", "/{tenantId}/things"},
		{http.MethodGet, "/things/1", "/{tenantId}/things/1"},
		{http.MethodPost, "/things", "/{tenantId}/things"},
		{http.MethodGet, "/raw/a/1.0", "/{tenantId}/raw/a/1.0"},
	} {
		b := errorBody(t, multi.do(tt.method, tt.target, "application/json", strings.NewReader("{}"), 2), 404, errs.CodeRouteNotFound)
		want := "no route " + tt.method + " " + tt.target + ": in multi-tenant mode every resource route starts with /{tenantId}, e.g. " + tt.method + " /acme" + tt.target
		if b.Error.Message != want {
			t.Errorf("%s %s: message\n  %s\nwant\n  %s", tt.method, tt.target, b.Error.Message, want)
		}
		if b.Error.Details["tenancy"] != "multi" || b.Error.Details["route"] != tt.route {
			t.Errorf("%s %s: details %v, want tenancy multi and route %s", tt.method, tt.target, b.Error.Details, tt.route)
		}
	}
	for _, target := range []string{"/nope", "/", "/acme/things/1/x"} {
		if b := errorBody(t, multi.get(target), 404, errs.CodeRouteNotFound); strings.Contains(b.Error.Message, "{tenantId}") || len(b.Error.Details) > 0 {
			t.Errorf("GET %s: a hint where no resource is named: %+v", target, b.Error)
		}
	}
	single := newFixture(t, rest.Config{})
	if b := errorBody(t, single.get("/things/1/x"), 404, errs.CodeRouteNotFound); strings.Contains(b.Error.Message, "tenant") {
		t.Errorf("single-tenant mode: %+v", b.Error)
	}
}
