package auth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/throttle"
)

// TestClientAddr: the TCP peer is the client unless it is a trusted
// proxy; then the nearest X-Forwarded-For hop that is not one is. IPv6
// clients count by /64.
func TestClientAddr(t *testing.T) {
	t.Parallel()
	proxies, err := throttle.ParseProxies([]string{"10.0.0.0/8", "2001:db8:ffff::1"})
	if err != nil {
		t.Fatal(err)
	}
	trusting := newGuard(t, auth.Config{Method: auth.MethodAPIKeyHeader, TrustedProxies: proxies})
	plain := newGuard(t, auth.Config{Method: auth.MethodAPIKeyHeader})
	cases := []struct {
		name, remote string
		xff          []string
		plain, trust string
	}{
		{"ipv4 peer", "192.0.2.1:4000", nil, "192.0.2.1", "192.0.2.1"},
		{"ipv6 peer by /64", "[2001:db8:1:2:3:4:5:6]:4000", nil, "2001:db8:1:2::/64", "2001:db8:1:2::/64"},
		{"mapped ipv4", "[::ffff:192.0.2.1]:4000", nil, "192.0.2.1", "192.0.2.1"},
		{"xff from an untrusted peer is ignored", "192.0.2.1:4000", []string{"198.51.100.9"}, "192.0.2.1", "192.0.2.1"},
		{"trusted proxy names the client", "10.1.1.1:4000", []string{"198.51.100.9"}, "10.1.1.1", "198.51.100.9"},
		{"a chain of proxies", "10.1.1.1:4000", []string{"203.0.113.5, 198.51.100.9, 10.2.2.2"}, "10.1.1.1", "198.51.100.9"},
		{"headers in order", "10.1.1.1:4000", []string{"203.0.113.5", "198.51.100.9", "10.2.2.2"}, "10.1.1.1", "198.51.100.9"},
		{"a client cannot pass for a proxy", "10.1.1.1:4000", []string{"10.3.3.3, 198.51.100.9"}, "10.1.1.1", "198.51.100.9"},
		{"garbage stops the walk", "10.1.1.1:4000", []string{"198.51.100.9, nonsense"}, "10.1.1.1", "10.1.1.1"},
		{"with a port", "10.1.1.1:4000", []string{"198.51.100.9:5555"}, "10.1.1.1", "198.51.100.9"},
		{"ipv6 proxy", "[2001:db8:ffff::1]:4000", []string{"2001:db8:9:9:9::1"}, "2001:db8:ffff::/64", "2001:db8:9:9::/64"},
		{"only proxies", "10.1.1.1:4000", []string{"10.2.2.2"}, "10.1.1.1", "10.2.2.2"},
	}
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodGet, "/events", nil)
		r.RemoteAddr = c.remote
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := plain.ClientAddr(r); got != c.plain {
			t.Errorf("%s, no proxies: %q, want %q", c.name, got, c.plain)
		}
		if got := trusting.ClientAddr(r); got != c.trust {
			t.Errorf("%s, trusted proxies: %q, want %q", c.name, got, c.trust)
		}
	}
}

// syncBuffer is a log sink safe for the failure log's timer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// throttleFixture is a guard with a failure budget of 3 per address that
// does not refill within a test, a token budget of 2 per client id, and
// a failure log reported only when flushed.
type throttleFixture struct {
	*fixture
	log *syncBuffer
}

func newThrottleFixture(t *testing.T, m auth.Method) *throttleFixture {
	t.Helper()
	f := newFixture(t, m)
	buf := &syncBuffer{}
	g, err := auth.NewGuard(auth.Config{Method: m, Endpoint: testEndpoint, SigningKey: testSigning, BootstrapKey: testBootstrap,
		FailurePerSecond: 1.0 / 86400, FailureBurst: 3, TokenPerSecond: 1.0 / 86400, TokenBurst: 2, FailureLogInterval: time.Hour},
		f.keys, slog.New(slog.NewJSONHandler(buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	f.guard = g
	return &throttleFixture{fixture: f, log: buf}
}

// call authenticates a request from addr carrying cred ("" for none).
func (f *throttleFixture) call(addr, cred string) error {
	r := httptest.NewRequest(http.MethodGet, "/events", nil)
	r.RemoteAddr = addr + ":5000"
	if cred != "" {
		r.Header.Set("Authorization", "Bearer "+cred)
	}
	_, err := f.guard.Authenticate(r)
	return err
}

// report flushes the failure log and returns its warnings.
func (f *throttleFixture) report(t *testing.T) []map[string]any {
	t.Helper()
	f.guard.FlushFailures()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(f.log.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["msg"] == "authentication failures" {
			out = append(out, rec)
		}
	}
	return out
}

// TestFailuresThrottled: refused credentials spend an address's budget;
// with none left the address is refused RATE_LIMITED before its
// credential is checked, a right one included. Missing credentials,
// successes and key store failures spend nothing; other addresses are
// not affected.
func TestFailuresThrottled(t *testing.T) {
	t.Parallel()
	f := newThrottleFixture(t, auth.MethodBearer)
	key, _ := f.mint(t, []string{"t1"}, auth.ScopeRead)
	forged, _, _ := auth.NewKey()
	const a, b = "192.0.2.1", "192.0.2.2"
	for range 10 {
		if err := f.call(a, ""); auth.ReasonOf(err) != auth.ReasonMissing {
			t.Fatalf("no credential: %v", err)
		}
		if err := f.call(a, key); err != nil {
			t.Fatalf("right key: %v", err)
		}
	}
	for i, cred := range []string{forged, "garbage", key[:len(key)-1] + "x"} {
		if err := f.call(a, cred); errs.CodeOf(err) != errs.CodeUnauthenticated {
			t.Fatalf("failure %d: %v", i, err)
		}
	}
	for _, cred := range []string{forged, key, ""} {
		err := f.call(a, cred)
		if cred == "" {
			if auth.ReasonOf(err) != auth.ReasonMissing {
				t.Fatalf("no credential from a throttled address: %v", err)
			}
			continue
		}
		e := errs.As(err)
		if e.Code != errs.CodeRateLimited || e.Details["retryAfterSeconds"].(int) < 1 {
			t.Fatalf("throttled address: %v %v", err, e.Details)
		}
		if strings.Contains(e.Message, cred) {
			t.Fatalf("the refusal repeats the credential: %s", e.Message)
		}
	}
	if err := f.call(b, key); err != nil {
		t.Fatalf("another address: %v", err)
	}

	recs := f.report(t)
	if len(recs) != 1 {
		t.Fatalf("%d reports, want 1: %s", len(recs), f.log)
	}
	r := recs[0]
	if r["level"] != "WARN" || r["failed"] != 3.0 || r["throttled"] != 2.0 || r["addressCount"] != 1.0 {
		t.Fatalf("report %v", r)
	}
	if reasons := r["reasons"].(map[string]any); reasons[auth.ReasonInvalid] != 3.0 {
		t.Fatalf("reasons %v", reasons)
	}
	if addrs := r["addresses"].(map[string]any); addrs[a] != 5.0 || len(addrs) != 1 {
		t.Fatalf("addresses %v", addrs)
	}
	if strings.Contains(f.log.String(), forged[len(forged)-52:]) || strings.Contains(f.log.String(), key[len(key)-52:]) {
		t.Fatalf("the log holds a credential: %s", f.log)
	}
	if recs := f.report(t); len(recs) != 1 {
		t.Fatalf("a report without failures: %s", f.log)
	}
}

// TestFailureReportBusiest: a report names the five busiest addresses,
// most failures first, and counts the rest.
func TestFailureReportBusiest(t *testing.T) {
	t.Parallel()
	f := newThrottleFixture(t, auth.MethodAPIKeyHeader)
	for i := range 8 {
		addr := "198.51.100." + string(rune('1'+i))
		for range i + 1 {
			r := httptest.NewRequest(http.MethodGet, "/events", nil)
			r.RemoteAddr = addr + ":5000"
			r.Header.Set(auth.DefaultHeaderScheme, "wrong")
			_, _ = f.guard.Authenticate(r)
		}
	}
	recs := f.report(t)
	if len(recs) != 1 {
		t.Fatalf("%d reports", len(recs))
	}
	addrs := recs[0]["addresses"].(map[string]any)
	if len(addrs) != 5 || recs[0]["addressCount"] != 8.0 || addrs["198.51.100.8"] != 8.0 || addrs["198.51.100.4"] != 4.0 {
		t.Fatalf("addresses %v of %v", addrs, recs[0]["addressCount"])
	}
}

// TestTokenEndpointLimits: the token endpoint shares the address's
// failure budget and limits tokens per client id, counted only for an
// authenticated client; both answer 429 temporarily_unavailable with
// Retry-After.
func TestTokenEndpointLimits(t *testing.T) {
	t.Parallel()
	f := newThrottleFixture(t, auth.MethodBearer)
	key, rec := f.mint(t, []string{"t1"}, auth.ScopeRead)
	other, otherRec := f.mint(t, []string{"t1"}, auth.ScopeRead)
	h := f.guard.TokenHandler()
	issue := func(addr, id, secret string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, auth.TokenPath, strings.NewReader("grant_type=client_credentials"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = addr + ":5000"
		if id != "" || secret != "" {
			req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	limited := func(what string, w *httptest.ResponseRecorder) {
		t.Helper()
		var body map[string]string
		_ = json.Unmarshal(w.Body.Bytes(), &body)
		if w.Code != http.StatusTooManyRequests || body["error"] != auth.OAuthTemporarilyUnavailable || w.Header().Get("Retry-After") == "" ||
			w.Header().Get("Cache-Control") != "no-store" {
			t.Fatalf("%s: %d %v %s", what, w.Code, w.Header(), w.Body)
		}
	}
	const a, b = "192.0.2.1", "192.0.2.2"
	// No client credentials spend nothing; wrong ones do.
	for range 5 {
		if w := issue(a, "", ""); w.Code != http.StatusUnauthorized {
			t.Fatalf("no client credentials: %d %s", w.Code, w.Body)
		}
	}
	for range 3 {
		if w := issue(a, rec.ID, "wrong"); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong secret: %d %s", w.Code, w.Body)
		}
	}
	limited("right secret from a throttled address", issue(a, rec.ID, key))
	// Routes and the token endpoint share the budget.
	if err := f.call(a, key); errs.CodeOf(err) != errs.CodeRateLimited {
		t.Fatalf("route from the throttled address: %v", err)
	}
	// Per client id: two tokens, then 429; another client is not affected.
	for range 2 {
		if w := issue(b, rec.ID, key); w.Code != http.StatusOK {
			t.Fatalf("token: %d %s", w.Code, w.Body)
		}
	}
	limited("third token", issue(b, rec.ID, key))
	if w := issue(b, otherRec.ID, other); w.Code != http.StatusOK {
		t.Fatalf("another client: %d %s", w.Code, w.Body)
	}
	// A client over its token limit has not failed to authenticate.
	if err := f.call(b, key); err != nil {
		t.Fatalf("the key from the client's address: %v", err)
	}
	if _, err := f.guard.Verify(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	recs := f.report(t)
	if len(recs) != 1 || recs[0]["failed"] != 3.0 || recs[0]["throttled"] != 2.0 {
		t.Fatalf("report %v", recs)
	}
}

func newGuard(t *testing.T, cfg auth.Config) *auth.Guard {
	t.Helper()
	g, err := auth.NewGuard(cfg, auth.NewKeys(newMemKV(), nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
