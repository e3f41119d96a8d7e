package send

import (
	"net/http"
	"strconv"
	"time"
)

// DefaultSchedule is the wait before each retry of a failed delivery: the
// first retry comes 5 s after the first attempt, the last about 28 h after
// it. An event still failing after its last retry is dead-lettered.
var DefaultSchedule = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute,
	2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// Backoff says when a failed attempt is tried again.
type Backoff struct {
	// Schedule is the wait before retry n+1 after failed attempt n+1.
	Schedule []time.Duration
	// Jitter spreads each wait by up to this fraction either way (0.2:
	// ±20 %), so the retries of many subscriptions do not come at once.
	Jitter float64
	// MaxRetryAfter bounds how long a receiver's Retry-After may hold a
	// retry back (it never shortens the scheduled wait).
	MaxRetryAfter time.Duration
}

// Wait returns the wait before the next attempt after the failed attempt
// number attempt (from 1), and false when no retry is left. retryAfter is
// the receiver's Retry-After (0: none); rnd is a number in [0, 1), the
// jitter's source.
func (b Backoff) Wait(attempt int, retryAfter time.Duration, rnd float64) (time.Duration, bool) {
	if attempt < 1 || attempt > len(b.Schedule) {
		return 0, false
	}
	wait := b.Schedule[attempt-1]
	if b.Jitter > 0 {
		wait += time.Duration((2*rnd - 1) * b.Jitter * float64(wait))
	}
	if retryAfter > wait {
		wait = min(retryAfter, max(b.MaxRetryAfter, wait))
	}
	return wait, true
}

// Step is what the retry policy makes of one attempt.
type Step int

const (
	// StepDelivered: the receiver answered 2xx; the next event goes.
	StepDelivered Step = iota
	// StepDisable: the receiver answered 410 Gone; the subscription is
	// disabled, and its delivery waits at the event until it is enabled.
	StepDisable
	// StepRetry: the attempt failed and a retry is left; the event is
	// tried again after the wait.
	StepRetry
	// StepDeadLetter: the attempt failed and no retry is left; the event
	// is dead-lettered and the subscription marked failing.
	StepDeadLetter
)

// Next is the retry and dead-letter policy, a pure function of one
// attempt: what follows attempt number attempt of an event (from 1,
// counting the attempts since it was last given a fresh schedule) that got
// status (0: no answer), with the receiver's Retry-After retryAfter (0:
// none) and rnd, the jitter's sample in [0, 1). Any status but 2xx and 410
// is a failure, a redirect too. The wait, for StepRetry only, is Wait's.
func (b Backoff) Next(attempt, status int, retryAfter time.Duration, rnd float64) (Step, time.Duration) {
	switch {
	case status >= 200 && status < 300:
		return StepDelivered, 0
	case status == http.StatusGone:
		return StepDisable, 0
	}
	if wait, ok := b.Wait(attempt, retryAfter, rnd); ok {
		return StepRetry, wait
	}
	return StepDeadLetter, 0
}

// RetryAfter reads a Retry-After header of a 429 or 503 answer (seconds,
// or an HTTP date, relative to now); 0 when absent, unreadable or for
// another status.
func RetryAfter(status int, h http.Header, now time.Time) time.Duration {
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		return 0
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, 1<<31)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
