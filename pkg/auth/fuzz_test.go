package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/auth"
)

// FuzzParseCredential feeds arbitrary strings to credential parsing and
// verification, in each place a credential can be sent. It must never
// panic, and must never accept a credential that was not issued: only the
// fixture's key, its token and the bootstrap key authenticate.
func FuzzParseCredential(f *testing.F) {
	fx := newFixture(f, auth.MethodBearer)
	key, rec := fx.mint(f, []string{"t1"}, auth.ScopeRead)
	token := fx.token(f, rec.ID, key)
	issued := map[string]bool{key: true, token: true, testBootstrap: true}

	for _, s := range []string{key, token, testBootstrap, "", "ab_", "ab__", key[:len(key)-1] + "a", strings.ToUpper(key),
		token[:len(token)-2], token + ".", "a.b.c", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", "Bearer " + key, "\x00", "é",
		"ab_" + rec.ID + "_" + strings.Repeat("a", 52), testBootstrap + " "} {
		f.Add(s, uint8(0))
	}
	guards := map[auth.Method]*auth.Guard{auth.MethodBearer: fx.guard}
	for _, m := range []auth.Method{auth.MethodAPIKeyHeader, auth.MethodAPIKeyQuery} {
		g, err := auth.NewGuard(auth.Config{Method: m, Endpoint: testEndpoint, BootstrapKey: testBootstrap}, fx.keys, nil)
		if err != nil {
			f.Fatal(err)
		}
		guards[m] = g
	}
	methods := []auth.Method{auth.MethodBearer, auth.MethodAPIKeyHeader, auth.MethodAPIKeyQuery}

	f.Fuzz(func(t *testing.T, s string, which uint8) {
		m := methods[int(which)%len(methods)]
		g := guards[m]
		// Parsing alone.
		vals := []string{s}
		if m == auth.MethodBearer {
			vals = []string{"Bearer " + s}
		}
		cred, err := auth.ParseCredential(m, vals)
		if err == nil && cred != strings.Trim(s, " ") {
			t.Fatalf("parsed %q from %q", cred, s)
		}
		// Verification of the raw string.
		if p, err := g.Verify(context.Background(), s); err == nil {
			if !issued[s] || (m != auth.MethodBearer && s == token) {
				t.Fatalf("%s accepted %q (principal %+v)", m, s, p)
			}
		}
		// The whole request path.
		r := httptest.NewRequest(http.MethodGet, "/events", nil)
		switch m {
		case auth.MethodBearer:
			r.Header["Authorization"] = []string{"Bearer " + s}
		case auth.MethodAPIKeyHeader:
			r.Header[auth.DefaultHeaderScheme] = []string{s}
		case auth.MethodAPIKeyQuery:
			r.URL.RawQuery = auth.DefaultQueryScheme + "=" + url.QueryEscape(s)
		}
		if p, err := g.Authenticate(r); err == nil {
			c, _ := g.Credential(r)
			if !issued[c] {
				t.Fatalf("%s authenticated %q as %+v", m, s, p)
			}
		}
	})
}
