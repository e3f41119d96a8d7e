package auth

import (
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
)

// TestRateLimit runs the guard on a fake clock (the registry's, which the
// guard and its limiter share), so refilling a bucket takes no real time.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	keys := NewKeys(nil, nil) // Admit never reaches the store
	keys.now = func() time.Time { return clock }
	g, err := NewGuard(Config{Method: MethodAPIKeyHeader, RatePerSecond: 1, RateBurst: 2}, keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &Principal{ID: "a", Kind: KindKey}
	b := &Principal{ID: "b", Kind: KindKey}
	for range 2 {
		if err := g.Admit(a); err != nil {
			t.Fatal(err)
		}
	}
	err = g.Admit(a)
	e := errs.As(err)
	if e.Code != errs.CodeRateLimited || e.Details["retryAfterSeconds"] != 1 {
		t.Fatalf("over the limit: %v %v", err, e.Details)
	}
	if err := g.Admit(b); err != nil {
		t.Fatalf("another credential: %v", err)
	}
	clock = clock.Add(1100 * time.Millisecond)
	if err := g.Admit(a); err != nil {
		t.Fatalf("after a second: %v", err)
	}
}
