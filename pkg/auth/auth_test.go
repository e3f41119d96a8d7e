package auth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// memKV is an in-memory auth.Store for unit tests and fuzzing; the NATS
// implementation is exercised by test/e2e.
type memKV struct {
	mu       sync.Mutex
	vals     map[string][]byte
	revs     map[string]uint64
	rev      uint64
	watchers []func(bus.KVChange)
	gets     int      // calls of Get
	got      []string // the keys Get was called with
	getErr   error    // when set, Get fails with it
}

var _ auth.Store = (*memKV)(nil)

func newMemKV() *memKV { return &memKV{vals: map[string][]byte{}, revs: map[string]uint64{}} }

func (m *memKV) Get(_ context.Context, key string) ([]byte, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gets++
	m.got = append(m.got, key)
	if m.getErr != nil {
		return nil, 0, m.getErr
	}
	v, ok := m.vals[key]
	if !ok {
		return nil, 0, errs.ErrNotFound
	}
	return v, m.revs[key], nil
}

func (m *memKV) put(key string, val []byte) uint64 {
	m.rev++
	m.vals[key], m.revs[key] = val, m.rev
	for _, w := range m.watchers {
		w(bus.KVChange{Key: key, Value: val, Revision: m.rev})
	}
	return m.rev
}

func (m *memKV) Create(_ context.Context, key string, val []byte) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.vals[key]; ok {
		return 0, errs.ErrConflict
	}
	return m.put(key, val), nil
}

func (m *memKV) Update(_ context.Context, key string, val []byte, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revs[key] != rev {
		return 0, errs.ErrConflict
	}
	return m.put(key, val), nil
}

func (m *memKV) Put(_ context.Context, key string, val []byte) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.put(key, val), nil
}

func (m *memKV) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.vals, key)
	for _, w := range m.watchers {
		w(bus.KVChange{Key: key, Deleted: true})
	}
	return nil
}

func (m *memKV) Watch(_ context.Context, pattern string, fn func(bus.KVChange)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	prefix := strings.TrimSuffix(pattern, "*")
	for k, v := range m.vals {
		if strings.HasPrefix(k, prefix) {
			fn(bus.KVChange{Key: k, Value: v, Revision: m.revs[k]})
		}
	}
	m.watchers = append(m.watchers, func(c bus.KVChange) {
		if strings.HasPrefix(c.Key, prefix) {
			fn(c)
		}
	})
	return nil
}

const (
	testBootstrap = "bootstrap-secret-for-unit-tests"
	testEndpoint  = "http://agentbus.test"
)

var testSigning = []byte("unit-test-signing-key-0123456789abcdef")

type fixture struct {
	kv    *memKV
	keys  *auth.Keys
	guard *auth.Guard
}

func newFixture(t testing.TB, method auth.Method) *fixture {
	t.Helper()
	f := &fixture{kv: newMemKV()}
	f.keys = auth.NewKeys(f.kv, nil)
	if err := f.keys.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	g, err := auth.NewGuard(auth.Config{Method: method, Endpoint: testEndpoint, SigningKey: testSigning,
		BootstrapKey: testBootstrap, RatePerSecond: 1, RateBurst: 2}, f.keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.guard = g
	return f
}

func (f *fixture) mint(t testing.TB, tenants []string, scopes ...auth.Scope) (string, *auth.Key) {
	t.Helper()
	key, rec, err := f.keys.Create(context.Background(), auth.NewKeyRequest{Tenants: tenants, Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	return key, rec
}

// tokenFrom returns the access token of a successful token endpoint
// response.
func tokenFrom(t testing.TB, w *httptest.ResponseRecorder) string {
	t.Helper()
	var res auth.TokenResponse
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || w.Code != http.StatusOK || res.AccessToken == "" || res.TokenType != "Bearer" {
		t.Fatalf("token response %d %s: %v", w.Code, w.Body, err)
	}
	return res.AccessToken
}

// token obtains a token for key (id its id) with every scope of the key,
// from the fixture's token endpoint with HTTP Basic.
func (f *fixture) token(t testing.TB, id, key string) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, auth.TokenPath, strings.NewReader("grant_type=client_credentials"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(id, key)
	w := httptest.NewRecorder()
	f.guard.TokenHandler().ServeHTTP(w, req)
	return tokenFrom(t, w)
}

func TestKeyFormatAndStorage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, auth.MethodBearer)
	key, rec := f.mint(t, []string{"t1"}, auth.ScopeRead)
	if len(key) != auth.KeyLen || !strings.HasPrefix(key, "ab_"+rec.ID+"_") {
		t.Fatalf("key %q, id %q", key, rec.ID)
	}
	if id, ok := auth.KeyIDOf(key); !ok || id != rec.ID {
		t.Fatalf("KeyIDOf: %q %v", id, ok)
	}
	raw, _, err := f.kv.Get(context.Background(), "key."+rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), key[len("ab_")+17:]) {
		t.Fatal("the stored record holds the secret")
	}
	if !strings.Contains(string(raw), `"hash":"sha256:`) {
		t.Fatalf("record %s", raw)
	}
	other, _ := f.mint(t, []string{"t1"}, auth.ScopeRead)
	if other == key {
		t.Fatal("two keys are equal")
	}
}

func TestVerifyKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t, auth.MethodAPIKeyHeader)
	ctx := context.Background()
	key, rec := f.mint(t, []string{"t1"}, auth.ScopeRead, auth.ScopeWrite)
	p, err := f.guard.Verify(ctx, key)
	if err != nil || p.ID != rec.ID || !p.HasTenant("t1") || p.HasTenant("t2") || !p.HasScope(auth.ScopeWrite) || p.HasScope(auth.ScopeAdmin) {
		t.Fatalf("verify: %+v %v", p, err)
	}
	if err := p.Allow("t2", auth.ScopeRead); errs.CodeOf(err) != errs.CodeForbidden {
		t.Fatalf("other tenant: %v", err)
	}
	if err := p.Allow("t1", auth.ScopeAdmin); errs.CodeOf(err) != errs.CodeForbidden {
		t.Fatalf("admin scope: %v", err)
	}
	cases := map[string]struct{ cred, reason string }{
		"wrong secret":   {key[:len(key)-1] + map[bool]string{true: "b", false: "a"}[key[len(key)-1] == 'a'], auth.ReasonInvalid},
		"unknown id":     {"ab_aaaaaaaaaaaaaaaa_" + strings.Repeat("a", 52), auth.ReasonInvalid},
		"uppercase":      {strings.ToUpper(key), auth.ReasonInvalid},
		"short":          {key[:len(key)-1], auth.ReasonInvalid},
		"a token string": {"a.b.c", auth.ReasonInvalid},
	}
	for name, c := range cases {
		if _, err := f.guard.Verify(ctx, c.cred); auth.ReasonOf(err) != c.reason || errs.CodeOf(err) != errs.CodeUnauthenticated {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := f.keys.Revoke(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.guard.Verify(ctx, key); auth.ReasonOf(err) != auth.ReasonRevoked {
		t.Fatalf("revoked: %v", err)
	}
	if _, err := f.keys.Revoke(ctx, "aaaaaaaaaaaaaaaa"); err != auth.ErrNoSuchKey {
		t.Fatalf("revoke unknown: %v", err)
	}
	if p, err := f.guard.Verify(ctx, testBootstrap); err != nil || p.Kind != auth.KindBootstrap || !p.HasScope(auth.ScopeAdmin) || !p.HasTenant("any") {
		t.Fatalf("bootstrap: %+v %v", p, err)
	}
}

// TestKeyCreatedElsewhere: a key created through another registry (another
// replica) is found by one direct lookup before the watch delivers it.
func TestKeyCreatedElsewhere(t *testing.T) {
	t.Parallel()
	kv := newMemKV()
	reader := auth.NewKeys(kv, nil) // never started: no watch
	writer := auth.NewKeys(kv, nil)
	key, _, err := writer.Create(context.Background(), auth.NewKeyRequest{Tenants: []string{"*"}, Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Verify(context.Background(), key); err != nil {
		t.Fatalf("verify through the store: %v", err)
	}
}

// failGets makes every Get fail with err from now on; nil ends it.
func (m *memKV) failGets(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.getErr = err
}

// TestKeyStoreFailure: when the store cannot be read for a key the cache
// does not hold, the caller of an API key, of a token and of the token
// endpoint is told the store is unavailable (or that the server failed),
// not that the credential is invalid or revoked; the failure is not
// remembered as a missing key; and only a key the store really lacks
// makes its tokens revoked.
func TestKeyStoreFailure(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		err        error
		code       errs.Code
		status     int
		retryAfter string
	}{
		"unavailable": {fmt.Errorf("%w: no responders", errs.ErrUnavailable), errs.CodeUnavailable, http.StatusServiceUnavailable, "1"},
		"other":       {errors.New("disk on fire"), errs.CodeInternal, http.StatusInternalServerError, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t, auth.MethodBearer) // another replica, which issues the token
			key, rec := f.mint(t, []string{"t1"}, auth.ScopeRead)
			tok := f.token(t, rec.ID, key)
			// replica returns a guard on the same store whose registry was
			// never started: it knows no key and reads every one directly.
			replica := func() *auth.Guard {
				g, err := auth.NewGuard(auth.Config{Method: auth.MethodBearer, Endpoint: testEndpoint, SigningKey: testSigning},
					auth.NewKeys(f.kv, nil), nil)
				if err != nil {
					t.Fatal(err)
				}
				return g
			}
			g := replica()

			f.kv.failGets(c.err)
			for cred, what := range map[string]string{key: "API key", tok: "token"} {
				_, err := g.Verify(ctx, cred)
				e := errs.As(err)
				if e.Code != c.code || auth.ReasonOf(err) != "" || !errors.Is(err, c.err) {
					t.Fatalf("%s while the store fails: %v", what, err)
				}
				if c.code == errs.CodeUnavailable && e.Details["retryAfterSeconds"] != 1 {
					t.Fatalf("%s while the store is unavailable: details %v", what, e.Details)
				}
			}
			req := httptest.NewRequest(http.MethodPost, auth.TokenPath, strings.NewReader("grant_type=client_credentials"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.SetBasicAuth(rec.ID, key)
			w := httptest.NewRecorder()
			g.TokenHandler().ServeHTTP(w, req)
			var body map[string]string
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != c.status || body["error"] != auth.OAuthServerError ||
				w.Header().Get("Retry-After") != c.retryAfter || w.Header().Get("WWW-Authenticate") != "" {
				t.Fatalf("token endpoint while the store fails: %d %v %s", w.Code, w.Header(), w.Body)
			}

			f.kv.failGets(nil)
			if _, err := g.Verify(ctx, tok); err != nil {
				t.Fatalf("token once the store answers: %v", err)
			}
			if _, err := g.Verify(ctx, key); err != nil {
				t.Fatalf("API key once the store answers: %v", err)
			}

			if err := f.kv.Delete(ctx, "key."+rec.ID); err != nil {
				t.Fatal(err)
			}
			_, err := replica().Verify(ctx, tok)
			if e := errs.As(err); e.Code != errs.CodeUnauthenticated || auth.ReasonOf(err) != auth.ReasonRevoked ||
				e.Message != "the key that issued this token no longer exists" {
				t.Fatalf("token of a key the store lacks: %v", err)
			}
		})
	}
}

func (m *memKV) getCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gets
}

// TestUnknownIDsBoundStoreReads: well-formed keys with ids the cache does
// not know, sent without any credential and also to the token endpoint,
// cost a bounded number of store reads per registry, not one each.
func TestUnknownIDsBoundStoreReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, auth.MethodBearer)
	ctx := context.Background()
	before := f.kv.getCount()
	h := f.guard.TokenHandler()
	for i := range 400 {
		fresh, _, err := auth.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := f.guard.Verify(ctx, fresh); auth.ReasonOf(err) != auth.ReasonInvalid {
				t.Fatalf("unknown key: %v", err)
			}
			continue
		}
		req := httptest.NewRequest(http.MethodPost, auth.TokenPath, strings.NewReader("grant_type=client_credentials"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("", fresh)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("token for an unknown key: %d %s", w.Code, w.Body)
		}
	}
	// 20 at once, refilled at 20 per second: a slow run may add a few.
	if reads := f.kv.getCount() - before; reads < 20 || reads > 40 {
		t.Fatalf("%d store reads for 400 unknown ids, want 20 to 40", reads)
	}
	// Keys the cache knows still verify without the store.
	key, _ := f.mint(t, []string{"t1"}, auth.ScopeRead)
	before = f.kv.getCount()
	if _, err := f.guard.Verify(ctx, key); err != nil || f.kv.getCount() != before {
		t.Fatalf("cached key: %v, %d reads", err, f.kv.getCount()-before)
	}
}

func TestParseCredential(t *testing.T) {
	t.Parallel()
	cases := []struct {
		m      auth.Method
		vals   []string
		want   string
		reason string
	}{
		{auth.MethodBearer, []string{"Bearer abc"}, "abc", ""},
		{auth.MethodBearer, []string{"bearer abc"}, "abc", ""},
		{auth.MethodBearer, []string{"Bearer   abc  "}, "abc", ""},
		{auth.MethodBearer, nil, "", auth.ReasonMissing},
		{auth.MethodBearer, []string{"Bearer "}, "", auth.ReasonMissing},
		{auth.MethodBearer, []string{"Basic abc"}, "", auth.ReasonMalformed},
		{auth.MethodBearer, []string{"abc"}, "", auth.ReasonMalformed},
		{auth.MethodBearer, []string{"Bearer a b"}, "", auth.ReasonMalformed},
		{auth.MethodBearer, []string{"Bearer a", "Bearer b"}, "", auth.ReasonMalformed},
		{auth.MethodBearer, []string{"Bearer \x00"}, "", auth.ReasonMalformed},
		{auth.MethodAPIKeyHeader, []string{"k1"}, "k1", ""},
		{auth.MethodAPIKeyHeader, []string{"Bearer k1"}, "", auth.ReasonMalformed},
		{auth.MethodAPIKeyQuery, []string{""}, "", auth.ReasonMissing},
		{auth.MethodAPIKeyQuery, []string{strings.Repeat("k", 9000)}, "", auth.ReasonMalformed},
	}
	for _, c := range cases {
		got, err := auth.ParseCredential(c.m, c.vals)
		if got != c.want || auth.ReasonOf(err) != c.reason {
			t.Errorf("%s %q: got %q %v", c.m, c.vals, got, err)
		}
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, auth.MethodBearer)
	key, rec := f.mint(t, []string{"t1"}, auth.ScopeRead, auth.ScopeWrite)
	h := f.guard.TokenHandler()
	issue := func(form url.Values, user, pass string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, auth.TokenPath, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if user != "" || pass != "" {
			req.SetBasicAuth(url.QueryEscape(user), url.QueryEscape(pass))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	w := issue(url.Values{"grant_type": {"client_credentials"}, "scope": {"read"}}, rec.ID, key)
	if w.Code != 200 || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("token: %d %s", w.Code, w.Body)
	}
	tok := tokenFrom(t, w)
	p, err := f.guard.Verify(context.Background(), tok)
	if err != nil || p.Kind != auth.KindToken || p.ID != rec.ID || !p.HasScope(auth.ScopeRead) || p.HasScope(auth.ScopeWrite) || !p.HasTenant("t1") {
		t.Fatalf("token principal %+v %v", p, err)
	}
	// The payload cannot be widened without the signature failing.
	parts := strings.Split(tok, ".")
	claims, _ := base64.RawURLEncoding.DecodeString(parts[1])
	wide := strings.Replace(string(claims), `"scope":"read"`, `"scope":"read write admin"`, 1)
	forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(wide)) + "." + parts[2]
	if _, err := f.guard.Verify(context.Background(), forged); auth.ReasonOf(err) != auth.ReasonInvalid {
		t.Fatalf("widened token: %v", err)
	}
	// Form client authentication, client_id omitted: the key names itself.
	if w := issue(url.Values{"grant_type": {"client_credentials"}, "client_secret": {key}}, "", ""); w.Code != 200 {
		t.Fatalf("form auth: %d %s", w.Code, w.Body)
	}
	if w := issue(url.Values{"grant_type": {"client_credentials"}}, "bootstrap", testBootstrap); w.Code != 200 || !strings.Contains(w.Body.String(), `"scope":"read write admin"`) {
		t.Fatalf("bootstrap: %d %s", w.Code, w.Body)
	}
	// A token is not a client credential.
	if w := issue(url.Values{"grant_type": {"client_credentials"}}, rec.ID, tok); w.Code != 401 {
		t.Fatalf("token as client secret: %d %s", w.Code, w.Body)
	}
	if _, err := f.keys.Revoke(context.Background(), rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.guard.Verify(context.Background(), tok); auth.ReasonOf(err) != auth.ReasonRevoked {
		t.Fatalf("token of a revoked key: %v", err)
	}
}

func TestSigningKeySharedOnce(t *testing.T) {
	t.Parallel()
	kv := newMemKV()
	k1, err := auth.SigningKey(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := auth.SigningKey(context.Background(), kv)
	if err != nil || string(k1) != string(k2) || len(k1) < auth.MinSigningKeyLen {
		t.Fatalf("second replica got another key: %v", err)
	}
}

func TestManifestBlockAndSchemes(t *testing.T) {
	t.Parallel()
	for _, m := range []auth.Method{auth.MethodNone, auth.MethodBearer, auth.MethodAPIKeyHeader, auth.MethodAPIKeyQuery} {
		f := newFixture(t, m)
		block := f.guard.ManifestBlock()
		schemes, req := f.guard.SecuritySchemes()
		switch m {
		case auth.MethodNone:
			if block != nil || schemes != nil || req != nil || f.guard.Scheme() != "" {
				t.Fatalf("none: %v %v %q", block, schemes, f.guard.Scheme())
			}
		case auth.MethodBearer:
			if block["tokenUrl"] != testEndpoint+auth.TokenPath || schemes["oauth2"] == nil || len(req("write")) != 2 || f.guard.Scheme() != "" {
				t.Fatalf("bearer: %v %v %q", block, schemes, f.guard.Scheme())
			}
			// A scheme given for bearer (config accepts "Bearer") is dropped.
			g, err := auth.NewGuard(auth.Config{Method: auth.MethodBearer, Scheme: "Bearer", Endpoint: testEndpoint, SigningKey: testSigning}, f.keys, nil)
			if err != nil {
				t.Fatal(err)
			}
			if g.Scheme() != "" {
				t.Fatalf("bearer with a scheme: %q", g.Scheme())
			}
		default:
			in := map[auth.Method]string{auth.MethodAPIKeyHeader: "header", auth.MethodAPIKeyQuery: "query"}[m]
			apiKey := schemes["apiKey"].(map[string]any)
			if block["scheme"] != f.guard.Scheme() || apiKey["name"] != f.guard.Scheme() || block["in"] != in || apiKey["in"] != in {
				t.Fatalf("%s: %v %v", m, block, schemes)
			}
			want := `APIKey realm="agentbus", in="` + in + `", name="` + f.guard.Scheme() + `"`
			if ch := f.guard.Challenge(errs.New(errs.CodeUnauthenticated, "no")); ch != want {
				t.Fatalf("%s: challenge %q", m, ch)
			}
		}
	}
}

// TestTokenFollowsKey: a token carries at most what its key's record
// grants at use: narrowing the key's scopes or tenants narrows tokens
// issued before, and widening the key widens none.
func TestTokenFollowsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name                   string
		keyTenants, tokTenants []string // tokTenants nil: all the key's
		keyScopes              []auth.Scope
		now                    auth.Key // the record's new tenants and scopes
		wantTenants            []string
		wantScopes             []auth.Scope
	}{
		{"unchanged", []string{"t1", "t2"}, nil, []auth.Scope{auth.ScopeRead, auth.ScopeWrite},
			auth.Key{Tenants: []string{"t1", "t2"}, Scopes: []auth.Scope{auth.ScopeRead, auth.ScopeWrite}},
			[]string{"t1", "t2"}, []auth.Scope{auth.ScopeRead, auth.ScopeWrite}},
		{"scopes narrowed", []string{"t1"}, nil, []auth.Scope{auth.ScopeRead, auth.ScopeWrite},
			auth.Key{Tenants: []string{"t1"}, Scopes: []auth.Scope{auth.ScopeRead}},
			[]string{"t1"}, []auth.Scope{auth.ScopeRead}},
		{"tenants narrowed", []string{"t1", "t2"}, nil, []auth.Scope{auth.ScopeRead},
			auth.Key{Tenants: []string{"t2", "t3"}, Scopes: []auth.Scope{auth.ScopeRead}},
			[]string{"t2"}, []auth.Scope{auth.ScopeRead}},
		{"every tenant narrowed", []string{"*"}, nil, []auth.Scope{auth.ScopeRead},
			auth.Key{Tenants: []string{"t3"}, Scopes: []auth.Scope{auth.ScopeRead}},
			[]string{"t3"}, []auth.Scope{auth.ScopeRead}},
		{"widened key, same token", []string{"t1"}, nil, []auth.Scope{auth.ScopeRead},
			auth.Key{Tenants: []string{"*"}, Scopes: auth.AllScopes},
			[]string{"t1"}, []auth.Scope{auth.ScopeRead}},
		{"nothing left", []string{"t1"}, nil, []auth.Scope{auth.ScopeWrite},
			auth.Key{Tenants: []string{"t2"}, Scopes: []auth.Scope{auth.ScopeRead}},
			[]string{}, []auth.Scope{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, auth.MethodBearer)
			key, rec := f.mint(t, c.keyTenants, c.keyScopes...)
			tok := f.token(t, rec.ID, key)
			upd := *rec
			upd.Tenants, upd.Scopes = c.now.Tenants, c.now.Scopes
			raw, _ := json.Marshal(upd)
			if _, err := f.kv.Put(ctx, "key."+rec.ID, raw); err != nil {
				t.Fatal(err)
			}
			p, err := f.guard.Verify(ctx, tok)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(p.Tenants) != fmt.Sprint(c.wantTenants) || fmt.Sprint(p.Scopes) != fmt.Sprint(c.wantScopes) {
				t.Fatalf("token now: tenants %v scopes %v; want %v %v", p.Tenants, p.Scopes, c.wantTenants, c.wantScopes)
			}
			for _, tn := range []string{"t1", "t2", "t3"} {
				for _, s := range auth.AllScopes {
					if p.Allow(tn, s) == nil && (!slices.Contains(c.wantTenants, tn) || !slices.Contains(c.wantScopes, s)) {
						t.Fatalf("allowed %s on %s", s, tn)
					}
				}
			}
			// The token's claims, remembered once verified, are not changed.
			if p2, _ := f.guard.Verify(ctx, tok); fmt.Sprint(p2.Scopes) != fmt.Sprint(c.wantScopes) {
				t.Fatalf("second use: %v", p2.Scopes)
			}
		})
	}
}

// TestBootstrapTokenFollowsKey: a bootstrap token is valid while the
// bootstrap key that issued it is configured, and refused by a replica
// whose bootstrap key is another or none.
func TestBootstrapTokenFollowsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, auth.MethodBearer)
	tok := f.token(t, auth.BootstrapID, testBootstrap)
	if _, err := f.guard.Verify(ctx, tok); err != nil {
		t.Fatalf("same bootstrap key: %v", err)
	}
	for name, bootstrap := range map[string]string{"replaced": "another-bootstrap-secret-for-unit-tests", "removed": ""} {
		g, err := auth.NewGuard(auth.Config{Method: auth.MethodBearer, Endpoint: testEndpoint, SigningKey: testSigning, BootstrapKey: bootstrap}, f.keys, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Verify(ctx, tok); auth.ReasonOf(err) != auth.ReasonRevoked {
			t.Fatalf("bootstrap key %s: %v", name, err)
		}
	}
	// The claim does not show the key.
	claims, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if !strings.Contains(string(claims), `"bkey":`) || strings.Contains(string(claims), testBootstrap) {
		t.Fatalf("claims %s", claims)
	}
}

// gotSince returns the keys Get was called with after the first n calls.
func (m *memKV) gotSince(n int) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.got[n:])
}

// TestUnknownIDLikeWrongSecret: an API key with an id nobody issued and a
// real id with a wrong secret are refused alike after the same work: one
// store read of the entry named by the presented key's hash, found
// missing, and none again within a second. A right key that the cache
// does not hold yet is found by that read.
func TestUnknownIDLikeWrongSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, auth.MethodAPIKeyHeader)
	key, _ := f.mint(t, []string{"t1"}, auth.ScopeRead)
	wrong := key[:len(key)-1] + map[bool]string{true: "b", false: "a"}[strings.HasSuffix(key, "a")]
	unknown, _, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	var answers []string
	for _, cred := range []string{wrong, unknown} {
		n := f.kv.getCount()
		_, err := f.guard.Verify(ctx, cred)
		if auth.ReasonOf(err) != auth.ReasonInvalid {
			t.Fatalf("%v", err)
		}
		answers = append(answers, err.Error())
		got := f.kv.gotSince(n)
		if len(got) != 1 || !strings.HasPrefix(got[0], "hash.") {
			t.Fatalf("store reads %q, want one of hash.<sha256>", got)
		}
		if _, err := f.guard.Verify(ctx, cred); auth.ReasonOf(err) != auth.ReasonInvalid || f.kv.getCount() != n+1 {
			t.Fatalf("again within a second: %v, %q", err, f.kv.gotSince(n))
		}
	}
	if answers[0] != answers[1] {
		t.Fatalf("answers differ: %q", answers)
	}
	// The right key needs no store read; one created through another
	// registry (replica), not yet in this one's cache, is found by it.
	n := f.kv.getCount()
	if _, err := f.guard.Verify(ctx, key); err != nil || f.kv.getCount() != n {
		t.Fatalf("cached key: %v, reads %q", err, f.kv.gotSince(n))
	}
	reader := auth.NewKeys(f.kv, nil) // never started: no watch
	if _, err := reader.Verify(ctx, key); err != nil {
		t.Fatalf("a key the cache does not hold: %v", err)
	}
	if got := f.kv.gotSince(n); len(got) != 2 || !strings.HasPrefix(got[0], "hash.") || !strings.HasPrefix(got[1], "key.") {
		t.Fatalf("store reads %q, want hash.<sha256> then key.<id>", got)
	}
}
