package throttle

import (
	"fmt"
	"testing"
	"time"
)

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
		l := NewLimiter(c.perSecond, c.burst, "", now)
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
	l := NewLimiter(0.5, 2, "", func() time.Time { return clock })
	var spent []*Bucket
	for range 2 {
		b, _, ok := l.Reserve("a")
		if !ok {
			t.Fatal("within the burst: refused")
		}
		spent = append(spent, b)
	}
	if _, wait, ok := l.Reserve("a"); ok || wait != 2*time.Second {
		t.Fatalf("empty bucket: ok %v, wait %v", ok, wait)
	}
	l.Refund(spent[0])
	if _, _, ok := l.Reserve("a"); !ok {
		t.Fatal("after a refund: refused")
	}
	clock = clock.Add(time.Second)
	if _, wait, ok := l.Reserve("a"); ok || wait != time.Second {
		t.Fatalf("half refilled: ok %v, wait %v", ok, wait)
	}
	clock = clock.Add(time.Second)
	if _, _, ok := l.Reserve("a"); !ok {
		t.Fatal("refilled: refused")
	}
	for range 10 { // refunds never overfill
		l.Refund(spent[1])
	}
	for i := range 3 {
		if _, _, ok := l.Reserve("a"); ok != (i < 2) {
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
	l := NewLimiter(1, 1, "", func() time.Time { return clock })
	for i := range maxBuckets {
		if _, ok := l.Take(fmt.Sprint(i)); !ok {
			t.Fatalf("id %d refused", i)
		}
	}
	if _, ok := l.Take("new-1"); !ok {
		t.Fatal("the first id past the bound: refused")
	}
	if _, ok := l.Take("new-2"); ok {
		t.Fatal("the second id past the bound shares the first one's bucket: allowed")
	}
	if len(l.buckets) != maxBuckets+1 {
		t.Fatalf("%d buckets", len(l.buckets))
	}
	clock = clock.Add(time.Minute) // every bucket idle and full again
	if _, ok := l.Take("new-2"); !ok || len(l.buckets) != 1 {
		t.Fatalf("after idle buckets are forgotten: %v, %d buckets", ok, len(l.buckets))
	}
}
