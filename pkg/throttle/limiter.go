package throttle

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter keeps one token bucket per id (a credential, a client id or a
// client address), forgetting buckets idle long enough to be full again.
// It holds at most maxBuckets; past that, once idle ones are forgotten,
// new ids share the bucket of its overflow id, so a flood of ids is
// limited as one. Safe for concurrent use.
type Limiter[K comparable] struct {
	limit    rate.Limit
	burst    int
	overflow K
	now      func() time.Time
	// refill is how long an empty bucket takes to be full again; sweep
	// how often idle buckets are looked for.
	refill, sweep time.Duration

	mu      sync.Mutex
	buckets map[K]*Bucket
	swept   time.Time
}

// maxRefill bounds a limiter's refill time, which is burst / rate and
// beyond time.Duration for a rate of one a day and a burst of 10^6; a
// bucket idle that long is full anyway.
const maxRefill = 10 * 365 * 24 * time.Hour

// maxBuckets bounds the buckets of one Limiter.
const maxBuckets = 100000

// Bucket is one token bucket: tokens as of last, refilled at the
// limiter's rate up to its burst.
type Bucket struct {
	tokens float64
	last   time.Time
}

// NewLimiter returns a limiter of perSecond tokens a second per id, with
// burst tokens, on the clock now.
func NewLimiter[K comparable](perSecond float64, burst int, overflow K, now func() time.Time) *Limiter[K] {
	l := rate.Limit(perSecond)
	refill := maxRefill // a slow rate and a large burst: kept, not overflowed
	if s := float64(burst) / float64(l); s < maxRefill.Seconds() {
		refill = time.Duration(s * float64(time.Second))
	}
	return &Limiter[K]{limit: l, burst: burst, overflow: overflow, now: now, refill: refill, sweep: max(refill, time.Minute),
		buckets: map[K]*Bucket{}, swept: now()}
}

// Take spends one token of id's bucket; when none is left it returns how
// long until one is, and false.
func (l *Limiter[K]) Take(id K) (time.Duration, bool) {
	_, wait, ok := l.Reserve(id)
	return wait, ok
}

// Reserve is Take that also returns the bucket spent from, for Refund.
func (l *Limiter[K]) Reserve(id K) (b *Bucket, wait time.Duration, ok bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > l.sweep {
		l.forgetIdle(now)
	}
	b = l.buckets[id]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.forgetIdle(now)
		}
		if len(l.buckets) >= maxBuckets {
			id = l.overflow
		}
		if b = l.buckets[id]; b == nil {
			b = &Bucket{tokens: float64(l.burst), last: now}
			l.buckets[id] = b
		}
	}
	if now.After(b.last) {
		b.tokens = min(float64(l.burst), b.tokens+now.Sub(b.last).Seconds()*float64(l.limit))
		b.last = now
	}
	if b.tokens < 1 {
		secs := (1 - b.tokens) / float64(l.limit)
		if secs >= maxRefill.Seconds() {
			return nil, maxRefill, false
		}
		return nil, time.Duration(secs * float64(time.Second)), false
	}
	b.tokens--
	return b, 0, true
}

// Refund gives back the token Reserve took from b.
func (l *Limiter[K]) Refund(b *Bucket) {
	l.mu.Lock()
	b.tokens = min(float64(l.burst), b.tokens+1)
	l.mu.Unlock()
}

// forgetIdle drops the buckets idle long enough to be full again. l.mu
// is held.
func (l *Limiter[K]) forgetIdle(now time.Time) {
	for k, b := range l.buckets {
		if now.Sub(b.last) > l.refill {
			delete(l.buckets, k)
		}
	}
	l.swept = now
}
