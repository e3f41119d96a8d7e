package auth_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/auth"
)

// BenchmarkAuthenticate measures the per-request cost of authentication on
// the hot path (cache hit, no store access).
func BenchmarkAuthenticate(b *testing.B) {
	fx := newFixture(b, auth.MethodBearer)
	key, rec := fx.mint(b, []string{"default"}, auth.ScopeRead, auth.ScopeWrite)
	w := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, auth.TokenPath, strings.NewReader("grant_type=client_credentials"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(rec.ID, key)
	fx.guard.TokenHandler().ServeHTTP(w, req)
	token := strings.Split(strings.Split(w.Body.String(), `"access_token":"`)[1], `"`)[0]
	for name, cred := range map[string]string{"apiKey": key, "token": token, "bootstrap": testBootstrap} {
		b.Run(name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/events", nil)
			r.Header.Set("Authorization", "Bearer "+cred)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fx.guard.Authenticate(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
