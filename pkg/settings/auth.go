package settings

import (
	"log/slog"
	"net"
	"regexp"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
)

// Auth selects how callers authenticate (see pkg/auth/README.md).
type Auth struct {
	// Type is none (default), bearer, apikey-header or apikey-query
	// [--auth, AGENTBUS_AUTH].
	Type string `json:"type"`
	// Scheme names the header (apikey-header, default X-API-Key) or query
	// parameter (apikey-query, default api_key) carrying the API key; it is
	// announced as authentication.scheme.
	Scheme string `json:"scheme"`
	// BootstrapKey is a credential with every scope on every tenant, kept in
	// memory only: for a first start, to create real keys with it
	// [AGENTBUS_BOOTSTRAP_KEY]. 16 to 512 printable characters.
	BootstrapKey Secret `json:"bootstrapKey"`
	// TokenTTL is the lifetime of bearer tokens from the token endpoint
	// (default 15m, 1m to 24h).
	TokenTTL Duration `json:"tokenTTL"`
	// TokenSigningKey signs bearer tokens (at least 32 bytes). Empty
	// (default): a random secret generated once and kept in the
	// AGENTBUS_KEYS bucket, shared by every replica.
	TokenSigningKey Secret `json:"tokenSigningKey"`
	// AllowInsecureListen lets serve listen on a non-loopback address
	// without authentication, and lets the embedded NATS server (which has
	// no TLS, and no authentication at all with auth.type none and no
	// nats.embedded.users) listen on one [--allow-insecure-listen].
	AllowInsecureListen bool `json:"allowInsecureListen"`
}

// Events holds event settings.
type Events struct {
	// AllowInjection turns on POST /events: synthetic events injected by
	// callers with the admin scope, kept apart from production events
	// (default false) [--allow-event-injection, AGENTBUS_ALLOW_EVENT_INJECTION].
	AllowInjection bool `json:"allowInjection"`
}

// Rate is a per-credential request rate limit: a token bucket refilled at
// PerSecond holding at most Burst. PerSecond 0 turns it off. Callers over
// it get 429 RATE_LIMITED with Retry-After. Anonymous callers (auth none)
// are not limited.
type Rate struct {
	PerSecond float64 `json:"perSecond"` // default 100
	Burst     int     `json:"burst"`     // default 200
}

// DefaultAuth is the default authentication: none, loopback only.
var DefaultAuth = Auth{Type: "none", TokenTTL: Duration(15 * time.Minute)}

// DefaultRate is the default per-credential rate limit.
var DefaultRate = Rate{PerSecond: 100, Burst: 200}

// MinRatePerSecond is the smallest rate limit (one request a day): below
// it the time to refill one request overflows.
const MinRatePerSecond = 1.0 / 86400

// check reports the rate, named key, unless its perSecond is 0 (off) or at
// least MinRatePerSecond and its burst is not negative.
func (r Rate) check(key string, bad func(string, ...any)) {
	if r.PerSecond < 0 || (r.PerSecond > 0 && r.PerSecond < MinRatePerSecond) {
		bad("%s.perSecond %g: must be 0 (off) or at least %g", key, r.PerSecond, MinRatePerSecond)
	}
	if r.Burst < 0 {
		bad("%s.burst %d: must not be negative", key, r.Burst)
	}
}

// Secret is a configuration string that is never shown: it prints, logs
// and marshals as "***" (empty stays empty).
type Secret string

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "***"
}

// LogValue masks the secret in slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON masks the secret.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }

// Reveal returns the secret itself, for the one component that uses it.
func (s Secret) Reveal() string { return string(s) }

var (
	headerNameRE = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
	queryNameRE  = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
)

func (c *Config) validateAuth(bad func(string, ...any)) {
	a := c.Auth
	if _, err := auth.ParseMethod(a.Type); err != nil {
		bad("%v", err)
	}
	switch {
	case a.Scheme == "":
	case a.Type == "apikey-header" && !headerNameRE.MatchString(a.Scheme):
		bad("auth.scheme %q: must be an HTTP header name", a.Scheme)
	case a.Type == "apikey-query" && !queryNameRE.MatchString(a.Scheme):
		bad("auth.scheme %q: must be a query parameter name [A-Za-z0-9_.-]{1,64}", a.Scheme)
	case a.Type == "bearer" && a.Scheme != "bearer" && a.Scheme != "Bearer":
		bad("auth.scheme %q: bearer always uses the Authorization header; leave scheme empty", a.Scheme)
	}
	if d := a.TokenTTL.D(); d < time.Minute || d > 24*time.Hour {
		bad("auth.tokenTTL %s: must be 1m to 24h", d)
	}
	if k := a.TokenSigningKey; k != "" && len(k) < auth.MinSigningKeyLen {
		bad("auth.tokenSigningKey: must be at least %d bytes", auth.MinSigningKeyLen)
	}
	if k := a.BootstrapKey; k != "" {
		if err := auth.CheckBootstrapKey(k.Reveal()); err != nil {
			bad("auth.bootstrapKey (AGENTBUS_BOOTSTRAP_KEY): %v", err)
		}
	}
	c.Limits.Rate.check("limits.rate", bad)
	// An address that is not host:port is reported by Validate alone.
	if !a.AllowInsecureListen {
		if a.Type == "none" && hostPort(c.Listen) && !loopback(c.Listen) {
			bad("listen %s is not a loopback address and auth.type is none: anyone who reaches it could use agentbus without credentials. "+
				"Turn on authentication (--auth bearer, apikey-header or apikey-query) or, to serve without it anyway, "+
				"set auth.allowInsecureListen (--allow-insecure-listen)", c.Listen)
		}
		if l := c.EmbeddedListen(); c.NATS.URL == "" && hostPort(l) && !loopback(l) {
			if c.EmbeddedRequiresAuth() {
				bad("nats.listen %s is not a loopback address: the embedded NATS server has no TLS, so passwords and every "+
					"message would cross the network in clear. Keep it on 127.0.0.1, use an external NATS cluster with TLS, "+
					"or set auth.allowInsecureListen (--allow-insecure-listen)", l)
			} else {
				bad("nats.listen %s is not a loopback address: the embedded NATS server has no authentication, so anyone who reaches it "+
					"could read every event and forge API keys. Keep it on 127.0.0.1, use an external NATS cluster with credentials, "+
					"or set auth.allowInsecureListen (--allow-insecure-listen)", l)
			}
		}
	}
}

// loopback reports whether host:port binds only a loopback address.
func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
