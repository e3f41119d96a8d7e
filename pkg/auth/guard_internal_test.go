package auth

import (
	"testing"
	"time"

	"golang.org/x/time/rate"

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

// TestLimiterRefillBounded: a slow rate with a large burst takes longer to
// refill than a time.Duration holds; the limiter keeps it bounded and
// positive, so idle buckets are not swept as full (which would hand out a
// fresh burst).
func TestLimiterRefillBounded(t *testing.T) {
	now := func() time.Time { return time.Unix(0, 0) }
	for _, c := range []struct {
		perSecond float64
		burst     int
		want      time.Duration
	}{
		{1, 2, 2 * time.Second},
		{1.0 / 86400, 1, 24 * time.Hour},
		{1.0 / 86400, 200000, maxRefill},
	} {
		l := newLimiter(rate.Limit(c.perSecond), c.burst, now)
		if l.refill != c.want || l.sweep < time.Minute {
			t.Errorf("rate %g burst %d: refill %v sweep %v, want refill %v", c.perSecond, c.burst, l.refill, l.sweep, c.want)
		}
	}
}
