package auth

import (
	"fmt"
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
		l := newLimiter(rate.Limit(c.perSecond), c.burst, "", now)
		if l.refill != c.want || l.sweep < time.Minute {
			t.Errorf("rate %g burst %d: refill %v sweep %v, want refill %v", c.perSecond, c.burst, l.refill, l.sweep, c.want)
		}
	}
}

// TestLimiterReserve: a reserved token can be given back; an empty
// bucket says how long until it holds one again.
func TestLimiterReserve(t *testing.T) {
	t.Parallel()
	clock := time.Unix(0, 0)
	l := newLimiter(rate.Limit(0.5), 2, "", func() time.Time { return clock })
	var spent []*bucket
	for range 2 {
		b, _, ok := l.reserve("a")
		if !ok {
			t.Fatal("within the burst: refused")
		}
		spent = append(spent, b)
	}
	if _, wait, ok := l.reserve("a"); ok || wait != 2*time.Second {
		t.Fatalf("empty bucket: ok %v, wait %v", ok, wait)
	}
	l.refund(spent[0])
	if _, _, ok := l.reserve("a"); !ok {
		t.Fatal("after a refund: refused")
	}
	clock = clock.Add(time.Second)
	if _, wait, ok := l.reserve("a"); ok || wait != time.Second {
		t.Fatalf("half refilled: ok %v, wait %v", ok, wait)
	}
	clock = clock.Add(time.Second)
	if _, _, ok := l.reserve("a"); !ok {
		t.Fatal("refilled: refused")
	}
	for range 10 { // refunds never overfill
		l.refund(spent[1])
	}
	for i := range 3 {
		if _, _, ok := l.reserve("a"); ok != (i < 2) {
			t.Fatalf("take %d after refunds: %v", i, ok)
		}
	}
}

// TestLimiterOverflow: past maxBuckets ids, new ids share one bucket
// (until idle buckets can be forgotten), so a flood of ids cannot grow
// the limiter or escape it.
func TestLimiterOverflow(t *testing.T) {
	t.Parallel()
	clock := time.Unix(0, 0)
	l := newLimiter(rate.Limit(1), 1, "", func() time.Time { return clock })
	for i := range maxBuckets {
		if _, ok := l.take(fmt.Sprint(i)); !ok {
			t.Fatalf("id %d refused", i)
		}
	}
	if _, ok := l.take("new-1"); !ok {
		t.Fatal("the first id past the bound: refused")
	}
	if _, ok := l.take("new-2"); ok {
		t.Fatal("the second id past the bound shares the first one's bucket: allowed")
	}
	if len(l.buckets) != maxBuckets+1 {
		t.Fatalf("%d buckets", len(l.buckets))
	}
	clock = clock.Add(time.Minute) // every bucket idle and full again
	if _, ok := l.take("new-2"); !ok || len(l.buckets) != 1 {
		t.Fatalf("after idle buckets are forgotten: %v, %d buckets", ok, len(l.buckets))
	}
}
