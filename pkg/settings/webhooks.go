package settings

import "time"

// Webhooks tunes webhook delivery (docs/webhooks.md).
type Webhooks struct {
	// AllowPrivate lets webhook URLs target loopback, private (RFC 1918),
	// shared (CGNAT), link-local and unique local addresses and localhost
	// names: for local development and tests only. Cloud metadata
	// endpoints and the other special addresses stay refused (default
	// false) [--allow-private-webhooks, AGENTBUS_ALLOW_PRIVATE_WEBHOOKS].
	AllowPrivate bool `json:"allowPrivate"`
	// Timeout bounds one delivery attempt: connecting, sending, the
	// response's headers and reading its body (default 15s, 10ms to 5m).
	Timeout Duration `json:"timeout"`
	// MaxResponseBytes is how much of a response body an attempt reads
	// (the rest is not read; default 64 KiB, 0 to 16 MiB).
	MaxResponseBytes int64 `json:"maxResponseBytes"`
	// RetrySchedule is the wait before each retry of a failed delivery;
	// after the last, the event is dead-lettered (default 5s, 5m, 30m,
	// 2h, 5h, 10h, 10h: about 28 hours; 1 to 30 entries, each 10ms to
	// 48h). Each wait is spread by ±20 % jitter.
	RetrySchedule []Duration `json:"retrySchedule"`
	// MaxRetryAfter bounds how long a receiver's Retry-After (on 429 or
	// 503) may hold the next attempt back (default 1h; it never shortens
	// the scheduled wait).
	MaxRetryAfter Duration `json:"maxRetryAfter"`
	// MaxInFlight bounds the deliveries in flight on this replica
	// (default 256).
	MaxInFlight int `json:"maxInFlight"`
}

// DefaultWebhooks is the webhooks' default configuration.
var DefaultWebhooks = Webhooks{Timeout: Duration(15 * time.Second), MaxResponseBytes: 64 << 10,
	RetrySchedule: []Duration{Duration(5 * time.Second), Duration(5 * time.Minute), Duration(30 * time.Minute),
		Duration(2 * time.Hour), Duration(5 * time.Hour), Duration(10 * time.Hour), Duration(10 * time.Hour)},
	MaxRetryAfter: Duration(time.Hour), MaxInFlight: 256}

func (c *Config) validateWebhooks(bad func(string, ...any)) {
	w := c.Webhooks
	if t := w.Timeout.D(); t < 10*time.Millisecond || t > 5*time.Minute {
		bad("webhooks.timeout %s: must be 10ms to 5m", t)
	}
	if n := w.MaxResponseBytes; n < 0 || n > 16<<20 {
		bad("webhooks.maxResponseBytes %d: must be 0 to 16777216 (16 MiB)", n)
	}
	if n := len(w.RetrySchedule); n < 1 || n > 30 {
		bad("webhooks.retrySchedule has %d entries: must be 1 to 30", n)
	}
	for i, d := range w.RetrySchedule {
		if d.D() < 10*time.Millisecond || d.D() > 48*time.Hour {
			bad("webhooks.retrySchedule[%d] %s: must be 10ms to 48h", i, d.D())
		}
	}
	if d := w.MaxRetryAfter.D(); d < 0 || d > 48*time.Hour {
		bad("webhooks.maxRetryAfter %s: must be 0 to 48h", d)
	}
	if n := w.MaxInFlight; n < 1 || n > 10000 {
		bad("webhooks.maxInFlight %d: must be 1 to 10000", n)
	}
}

// clone returns w with a retry schedule of its own.
func (w Webhooks) clone() Webhooks {
	w.RetrySchedule = append([]Duration(nil), w.RetrySchedule...)
	return w
}
