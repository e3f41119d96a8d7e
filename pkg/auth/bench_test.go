package auth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentbus/agentbus/pkg/auth"
)

// BenchmarkAuthenticate measures the per-request cost of authentication on
// the hot path (cache hit, no store access), with the failed
// authentication throttle on as by default.
func BenchmarkAuthenticate(b *testing.B) {
	fx := newFixture(b, auth.MethodBearer)
	g, err := auth.NewGuard(auth.Config{Method: auth.MethodBearer, Endpoint: testEndpoint, SigningKey: testSigning,
		BootstrapKey: testBootstrap, FailurePerSecond: 1, FailureBurst: 30}, fx.keys, nil)
	if err != nil {
		b.Fatal(err)
	}
	fx.guard = g
	key, rec := fx.mint(b, []string{"default"}, auth.ScopeRead, auth.ScopeWrite)
	token := fx.token(b, rec.ID, key)
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
