package settings

import (
	"time"

	"github.com/agentbus/agentbus/pkg/throttle"
)

// AuthLimits bounds what failed and repeated authentication may cost (see
// pkg/auth/README.md). A Rate with PerSecond 0 turns that limit off.
type AuthLimits struct {
	// Failures throttles failed authentication per client address: every
	// credential refused (401; a request without one does not count) spends
	// one; an address with none left is answered 429 RATE_LIMITED with
	// Retry-After, on the routes and the token endpoint, before its
	// credential is looked at (default 1 a second, burst 30).
	Failures Rate `json:"failures"`
	// Tokens limits the tokens the token endpoint issues per client id
	// (key id, or bootstrap): 429 with Retry-After over it (default 1 a
	// second, burst 20).
	Tokens Rate `json:"tokens"`
	// LogInterval is how often failed authentications are reported: one
	// warning with counts per interval that saw any (default 1m, 100ms to
	// 24h).
	LogInterval Duration `json:"logInterval"`
	// TrustedProxies are the addresses (IPs or CIDRs) of proxies whose
	// X-Forwarded-For header names the client. Empty (default): the TCP
	// peer is the client, and X-Forwarded-For is ignored.
	TrustedProxies []string `json:"trustedProxies"`
}

// DefaultAuthLimits are the default authentication limits.
var DefaultAuthLimits = AuthLimits{
	Failures:    Rate{PerSecond: 1, Burst: 30},
	Tokens:      Rate{PerSecond: 1, Burst: 20},
	LogInterval: Duration(time.Minute),
}

func (c *Config) validateAuthLimits(bad func(string, ...any)) {
	l := c.AuthLimits
	l.Failures.check("authLimits.failures", bad)
	l.Tokens.check("authLimits.tokens", bad)
	if d := l.LogInterval.D(); d < 100*time.Millisecond || d > 24*time.Hour {
		bad("authLimits.logInterval %s: must be 100ms to 24h", d)
	}
	if _, err := throttle.ParseProxies(l.TrustedProxies); err != nil {
		bad("authLimits.trustedProxies: %v", err)
	}
}
