package auth

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/bearer"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/throttle"
)

// MinSigningKeyLen is the shortest accepted token signing secret, in bytes.
const MinSigningKeyLen = bearer.MinSigningKeyLen

// SigningKey returns the token signing secret shared by every replica (see
// bearer.SigningKey).
func SigningKey(ctx context.Context, kv bus.KV) ([]byte, error) { return bearer.SigningKey(ctx, kv) }

// Config is the authentication setup. Zero values take the defaults noted.
type Config struct {
	Method Method // default none
	// Scheme is the header (apikey-header) or query parameter
	// (apikey-query) carrying the key; default X-API-Key / api_key. The
	// other methods have none: it is cleared for them.
	Scheme string
	// Endpoint is the public base URL: the tokens' issuer and audience, and
	// the base of the token URL.
	Endpoint string
	// TokenTTL is the lifetime of issued bearer tokens; default 15m.
	TokenTTL time.Duration
	// SigningKey signs bearer tokens (bearer method only; at least 32 bytes).
	SigningKey []byte
	// BootstrapKey, when set, is a credential with every scope on every
	// tenant, held in memory only: for a first start, to create real keys.
	BootstrapKey string
	// RatePerSecond and RateBurst limit requests per credential; 0 turns
	// the limit off.
	RatePerSecond float64
	RateBurst     int
	// FailurePerSecond and FailureBurst throttle failed authentication per
	// client address (see Authenticate); 0 turns the throttle off.
	FailurePerSecond float64
	FailureBurst     int
	// TokenPerSecond and TokenBurst limit the tokens issued per client id
	// (see TokenHandler); 0 turns the limit off.
	TokenPerSecond float64
	TokenBurst     int
	// FailureLogInterval is how often failed authentications are logged,
	// as one warning with counts; default 1m.
	FailureLogInterval time.Duration
	// TrustedProxies are the proxies whose X-Forwarded-For names the
	// client (see ParseProxies); none by default.
	TrustedProxies []netip.Prefix
}

// TokenPath is the token endpoint's path, relative to the endpoint.
const TokenPath = "/oauth/token"

// BootstrapID is the principal id of the bootstrap key.
const BootstrapID = "bootstrap"

func (c *Config) defaults() {
	if c.Method == "" {
		c.Method = MethodNone
	}
	switch c.Method {
	case MethodAPIKeyHeader:
		if c.Scheme == "" {
			c.Scheme = DefaultHeaderScheme
		}
	case MethodAPIKeyQuery:
		if c.Scheme == "" {
			c.Scheme = DefaultQueryScheme
		}
	default: // bearer reads the Authorization header; none reads nothing
		c.Scheme = ""
	}
	if c.TokenTTL <= 0 {
		c.TokenTTL = 15 * time.Minute
	}
	c.RateBurst = defaultBurst(c.RatePerSecond, c.RateBurst)
	c.FailureBurst = defaultBurst(c.FailurePerSecond, c.FailureBurst)
	c.TokenBurst = defaultBurst(c.TokenPerSecond, c.TokenBurst)
	if c.FailureLogInterval <= 0 {
		c.FailureLogInterval = time.Minute
	}
}

// defaultBurst returns burst, or the rate rounded up (at least 1) when
// burst is not positive and the rate is.
func defaultBurst(perSecond float64, burst int) int {
	if burst <= 0 && perSecond > 0 {
		return max(1, int(math.Ceil(perSecond)))
	}
	return burst
}

// Validate checks the config.
func (c *Config) Validate() error {
	if _, err := ParseMethod(string(c.Method)); err != nil {
		return err
	}
	if c.Method == MethodBearer && len(c.SigningKey) < MinSigningKeyLen {
		return fmt.Errorf("the token signing key must be at least %d bytes", MinSigningKeyLen)
	}
	if c.BootstrapKey != "" {
		if err := CheckBootstrapKey(c.BootstrapKey); err != nil {
			return err
		}
	}
	if c.RatePerSecond < 0 || c.FailurePerSecond < 0 || c.TokenPerSecond < 0 {
		return errors.New("the rate limits must not be negative")
	}
	return nil
}

// CheckBootstrapKey checks the shape of a bootstrap key: 16 to 512
// printable ASCII characters without spaces.
func CheckBootstrapKey(s string) error {
	if len(s) < 16 || len(s) > 512 || !printable(s) {
		return errors.New("the bootstrap key must be 16 to 512 printable ASCII characters without spaces (use e.g. `openssl rand -hex 32`)")
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// Guard authenticates requests and limits their rate. Safe for concurrent
// use.
type Guard struct {
	cfg       Config
	keys      *Keys
	tokens    *bearer.Tokens
	bootstrap []byte // SHA-256 of the bootstrap key; nil when none
	// bootstrapTag is the bkey claim of this bootstrap key's tokens.
	bootstrapTag string
	limiter      *throttle.Limiter[string]
	// failures throttles failed authentication by client address; issued
	// limits tokens by client id (nil when off).
	failures *throttle.Failures
	issued   *throttle.Limiter[string]
	log      *slog.Logger
	now      func() time.Time
}

// NewGuard returns the guard of cfg. keys may be nil only with method none;
// log may be nil.
func NewGuard(cfg Config, keys *Keys, log *slog.Logger) (*Guard, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if keys == nil && cfg.Method != MethodNone {
		return nil, errors.New("auth: a key registry is needed")
	}
	g := &Guard{cfg: cfg, keys: keys, log: log, now: time.Now}
	if keys != nil {
		g.now = keys.now
	}
	if cfg.Method == MethodBearer {
		g.tokens = bearer.New(cfg.SigningKey, cfg.Endpoint, cfg.TokenTTL, g.now, checkScope)
	}
	if cfg.BootstrapKey != "" {
		h := sha256.Sum256([]byte(cfg.BootstrapKey))
		g.bootstrap = h[:]
		g.bootstrapTag = bearer.BootstrapTag(cfg.SigningKey, g.bootstrap)
	}
	if cfg.RatePerSecond > 0 {
		g.limiter = throttle.NewLimiter(cfg.RatePerSecond, cfg.RateBurst, "", g.now)
	}
	if cfg.TokenPerSecond > 0 {
		g.issued = throttle.NewLimiter(cfg.TokenPerSecond, cfg.TokenBurst, "", g.now)
	}
	g.failures = throttle.NewFailures(cfg.FailurePerSecond, cfg.FailureBurst, cfg.FailureLogInterval, log, g.now)
	return g, nil
}

// ClientAddr returns the client address of r that failed authentication
// is counted against (throttle.ClientPrefix, with Config.TrustedProxies):
// the TCP peer or, behind a trusted proxy, the nearest X-Forwarded-For hop
// that is not one. An IPv6 address counts as its /64 and is written as
// that prefix; a peer that is not an IP is "unknown".
func (g *Guard) ClientAddr(r *http.Request) string { return throttle.AddrString(g.clientPrefix(r)) }

func (g *Guard) clientPrefix(r *http.Request) netip.Prefix {
	return throttle.ClientPrefix(r, g.cfg.TrustedProxies)
}

// FlushFailures logs the failed authentications counted since the last
// report now rather than at the end of the interval: for a shutdown.
func (g *Guard) FlushFailures() { g.failures.Flush() }

// Method returns the configured method.
func (g *Guard) Method() Method { return g.cfg.Method }

// Scheme returns the header or query parameter name of the apiKey methods
// ("" for bearer and none).
func (g *Guard) Scheme() string { return g.cfg.Scheme }

// Enabled reports whether callers must present credentials.
func (g *Guard) Enabled() bool { return g.cfg.Method != MethodNone }

var anonymous = &Principal{ID: "anonymous", Kind: KindAnonymous, Tenants: []string{AllTenants}, Scopes: AllScopes}

// Credential extracts the raw credential of r as the configured method
// says, or returns an UNAUTHENTICATED error (missing or malformed). It
// reads only the configured place: a credential sent elsewhere is missing.
func (g *Guard) Credential(r *http.Request) (string, error) {
	var vals []string
	switch g.cfg.Method {
	case MethodNone:
		return "", nil
	case MethodBearer:
		vals = r.Header.Values("Authorization")
	case MethodAPIKeyHeader:
		vals = r.Header.Values(g.cfg.Scheme)
	case MethodAPIKeyQuery:
		vals = r.URL.Query()[g.cfg.Scheme]
	}
	return ParseCredential(g.cfg.Method, vals)
}

// maxCredentialLen is the longest credential accepted, in bytes: API key,
// bootstrap key, token or client secret.
const maxCredentialLen = 8192

// ParseCredential returns the credential carried by vals, the values of
// the header or query parameter the method reads (for bearer: the
// Authorization header). Exactly one value is allowed; a bearer value must
// be "Bearer <credential>" (scheme case-insensitive). The credential must
// be 1 to 8192 printable ASCII characters. Errors are UNAUTHENTICATED with
// reason missing or malformed. It never panics.
func ParseCredential(m Method, vals []string) (string, error) {
	if len(vals) == 0 {
		return "", unauthenticated(ReasonMissing, "credentials are required")
	}
	if len(vals) > 1 {
		return "", unauthenticated(ReasonMalformed, "credentials were sent more than once")
	}
	v := vals[0]
	if m == MethodBearer {
		scheme, rest, ok := strings.Cut(v, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", unauthenticated(ReasonMalformed, `the Authorization header must be "Bearer <token>"`)
		}
		v = strings.TrimLeft(rest, " ")
	}
	v = strings.TrimRight(v, " ")
	switch {
	case v == "":
		return "", unauthenticated(ReasonMissing, "credentials are required")
	case len(v) > maxCredentialLen || !printable(v):
		return "", unauthenticated(ReasonMalformed, "the credential is malformed")
	}
	return v, nil
}

// Authenticate returns the caller of r, or an UNAUTHENTICATED error (or a
// key store failure, see Verify). With method none every caller is
// anonymous with every scope on every tenant. A credential is the bootstrap
// key, an API key, or (bearer only) a token from the token endpoint whose
// key is still active; a token's principal has the tenants and scopes of
// its claims that the key's current record still grants.
//
// Failed authentication is throttled per client address (ClientAddr):
// every credential refused spends one from the address's bucket; a
// request without any credential spends nothing. An address whose bucket
// is empty gets RATE_LIMITED (details.retryAfterSeconds) before its
// credential is looked at, so a right guess is refused like a wrong one
// until the bucket refills. Refusals are logged in aggregate (one
// warning with counts per FailureLogInterval), never with the credential.
func (g *Guard) Authenticate(r *http.Request) (*Principal, error) {
	if g.cfg.Method == MethodNone {
		return anonymous, nil
	}
	cred, err := g.Credential(r)
	if err != nil && ReasonOf(err) == ReasonMissing {
		return nil, err
	}
	client := g.clientPrefix(r)
	b, wait, ok := g.failures.Attempt(client)
	if !ok {
		secs := retrySeconds(wait)
		e := errs.New(errs.CodeRateLimited, "too many failed authentications from this address; retry in %d s", secs)
		e.Details = map[string]any{"retryAfterSeconds": secs}
		return nil, e
	}
	var p *Principal
	if err == nil {
		p, err = g.Verify(r.Context(), cred)
	}
	g.failures.Settle(client, b, refusal(err))
	return p, err
}

// refusal returns the reason an UNAUTHENTICATED error refuses a
// credential for, or "" for any other error and for none.
func refusal(err error) string {
	if err == nil || errs.CodeOf(err) != errs.CodeUnauthenticated {
		return ""
	}
	return cmp.Or(ReasonOf(err), ReasonInvalid)
}

// retrySeconds rounds a wait up to whole seconds, at least 1.
func retrySeconds(wait time.Duration) int { return max(1, int(math.Ceil(wait.Seconds()))) }

// Verify checks one credential string (see Authenticate). Besides
// UNAUTHENTICATED it fails with SERVICE_UNAVAILABLE (or INTERNAL_ERROR)
// when the key store cannot be read to check an API key, or the key behind
// a token, that the key cache does not hold.
func (g *Guard) Verify(ctx context.Context, cred string) (*Principal, error) {
	if g.isBootstrap(cred) {
		return g.bootstrapPrincipal(), nil
	}
	if _, ok := KeyIDOf(cred); ok {
		return g.keys.Verify(ctx, cred)
	}
	if g.tokens != nil && bearer.LooksLikeJWT(cred) {
		return g.verifyToken(ctx, cred)
	}
	return nil, unauthenticated(ReasonInvalid, "the credential is not valid")
}

// StillValid reports whether a credential authenticated earlier still
// holds, for what outlives one request (a live stream, an MCP session, an
// A2A task stream): UNAUTHENTICATED once a token has expired, or its key,
// or the key itself, is revoked, expired or gone. The bootstrap key and
// anonymous callers hold while the process runs. When the key store cannot
// be read it answers nil: a stream is not cut for a store that is away.
func (g *Guard) StillValid(ctx context.Context, p *Principal) error {
	if p == nil || p.Kind == KindAnonymous || p.Kind == KindBootstrap || p.ID == BootstrapID {
		return nil
	}
	if !p.Until.IsZero() && !time.Now().Before(p.Until) {
		return unauthenticated(ReasonExpired, "the bearer token expired")
	}
	if g.keys == nil {
		return nil
	}
	if _, err := g.keys.Active(ctx, p.ID); err != nil {
		if errors.Is(err, ErrNoSuchKey) {
			return unauthenticated(ReasonRevoked, "the credential's key no longer exists")
		}
		if errs.CodeOf(err) == errs.CodeUnauthenticated {
			return err
		}
	}
	return nil
}

func (g *Guard) isBootstrap(cred string) bool {
	if g.bootstrap == nil {
		return false
	}
	h := sha256.Sum256([]byte(cred))
	return subtle.ConstantTimeCompare(h[:], g.bootstrap) == 1
}

func (g *Guard) bootstrapPrincipal() *Principal {
	return &Principal{ID: BootstrapID, Kind: KindBootstrap, Tenants: []string{AllTenants}, Scopes: AllScopes}
}

// checkScope vets the scope claim of a bearer token: ParseScopes must
// accept it.
func checkScope(scope string) error {
	_, err := ParseScopes(scope)
	return err
}

func (g *Guard) verifyToken(ctx context.Context, raw string) (*Principal, error) {
	if len(raw) > maxCredentialLen {
		return nil, unauthenticated(ReasonMalformed, "the bearer token is too long")
	}
	c, err := g.tokens.Verify(raw)
	switch {
	case errors.Is(err, bearer.ErrMalformed):
		return nil, unauthenticated(ReasonMalformed, "the bearer token is malformed")
	case errors.Is(err, bearer.ErrExpired):
		return nil, unauthenticated(ReasonExpired, "the bearer token expired")
	case err != nil:
		return nil, unauthenticated(ReasonInvalid, "the bearer token is not valid")
	}
	scopes, err := ParseScopes(c.Scope) // vetted by checkScope: cannot fail
	if err != nil {
		return nil, unauthenticated(ReasonInvalid, "the bearer token is not valid")
	}
	p := &Principal{ID: c.Subject, Kind: KindToken, Tenants: c.Tenants, Scopes: scopes}
	if c.ExpiresAt != nil {
		p.Until = c.ExpiresAt.Time
	}
	if c.Subject == BootstrapID {
		switch {
		case g.bootstrap == nil:
			return nil, unauthenticated(ReasonRevoked, "the bootstrap key that issued this token is no longer configured")
		case subtle.ConstantTimeCompare([]byte(c.BootstrapKey), []byte(g.bootstrapTag)) != 1:
			return nil, unauthenticated(ReasonRevoked, "the bootstrap key that issued this token was replaced")
		}
		return p, nil
	}
	// A token lives no longer than its key: revoking the key revokes it.
	key, err := g.keys.Active(ctx, c.Subject)
	if err != nil {
		switch {
		case errors.Is(err, ErrNoSuchKey):
			return nil, unauthenticated(ReasonRevoked, "the key that issued this token no longer exists")
		case errs.CodeOf(err) != errs.CodeUnauthenticated: // the store could not be read
			return nil, err
		}
		return nil, unauthenticated(ReasonOf(err), "the key that issued this token is %s", ReasonOf(err))
	}
	// Nor does it carry more than its key grants now: a key whose scopes
	// or tenants were narrowed narrows its tokens.
	p.Tenants, p.Scopes = narrowTenants(p.Tenants, key.Tenants), narrowScopes(p.Scopes, key.Scopes)
	return p, nil
}

// narrowTenants returns the tenants of a token that its key still has:
// tok when the key has every tenant or all of tok's, else the tenants
// both hold (the key's own, when the token has every tenant).
func narrowTenants(tok, key []string) []string {
	switch {
	case slices.Contains(key, AllTenants) || !slices.ContainsFunc(tok, func(t string) bool { return !slices.Contains(key, t) }):
		return tok
	case slices.Contains(tok, AllTenants):
		return key
	}
	return slices.DeleteFunc(slices.Clone(tok), func(t string) bool { return !slices.Contains(key, t) })
}

// narrowScopes returns the scopes of a token that its key still has: tok
// itself when the key has them all.
func narrowScopes(tok, key []Scope) []Scope {
	if !slices.ContainsFunc(tok, func(s Scope) bool { return !slices.Contains(key, s) }) {
		return tok
	}
	return slices.DeleteFunc(slices.Clone(tok), func(s Scope) bool { return !slices.Contains(key, s) })
}

// Admit applies p's rate limit: nil, or a RATE_LIMITED error whose
// details.retryAfterSeconds says when to try again. The anonymous caller
// of method none is not limited.
func (g *Guard) Admit(p *Principal) error {
	if g.limiter == nil || p.Kind == KindAnonymous {
		return nil
	}
	wait, ok := g.limiter.Take(p.ID)
	if ok {
		return nil
	}
	secs := retrySeconds(wait)
	e := errs.New(errs.CodeRateLimited, "too many requests for this credential; retry in %d s", secs)
	e.Details = map[string]any{"retryAfterSeconds": secs, "limitPerSecond": g.cfg.RatePerSecond, "burst": g.cfg.RateBurst}
	return e
}

// Challenge returns the WWW-Authenticate value for an error of this
// guard, or "" when none applies: for bearer, RFC 6750's challenge on 401
// (with error="invalid_token" unless credentials were missing) and on a
// 403 for a missing scope (error="insufficient_scope"); for the apiKey
// methods, on 401, an APIKey challenge naming where the key goes (HTTP
// wants a challenge on every 401; no standard scheme exists for API keys).
func (g *Guard) Challenge(err error) string {
	if err == nil || g.cfg.Method == MethodNone {
		return ""
	}
	e := errs.As(err)
	if g.cfg.Method != MethodBearer {
		if e.Code != errs.CodeUnauthenticated {
			return ""
		}
		return `APIKey realm="agentbus", in="` + g.cfg.Method.in() + `", name="` + g.cfg.Scheme + `"`
	}
	switch e.Code {
	case errs.CodeUnauthenticated:
		if ReasonOf(err) == ReasonMissing {
			return `Bearer realm="agentbus"`
		}
		return `Bearer realm="agentbus", error="invalid_token", error_description="` + quoteSafe(e.Message) + `"`
	case errs.CodeForbidden:
		if s, ok := e.Details["requiredScope"].(string); ok {
			return `Bearer realm="agentbus", error="insufficient_scope", scope="` + s + `"`
		}
	}
	return ""
}

func quoteSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '"' || r == '\\' || r < 0x20 || r > 0x7e {
			return '\''
		}
		return r
	}, s)
}
