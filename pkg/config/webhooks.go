package config

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
}

// DefaultWebhooks is the webhooks' default configuration.
var DefaultWebhooks = Webhooks{Timeout: Duration(15 * time.Second), MaxResponseBytes: 64 << 10}

func (c *Config) validateWebhooks(bad func(string, ...any)) {
	w := c.Webhooks
	if t := w.Timeout.D(); t < 10*time.Millisecond || t > 5*time.Minute {
		bad("webhooks.timeout %s: must be 10ms to 5m", t)
	}
	if n := w.MaxResponseBytes; n < 0 || n > 16<<20 {
		bad("webhooks.maxResponseBytes %d: must be 0 to 16777216 (16 MiB)", n)
	}
}
