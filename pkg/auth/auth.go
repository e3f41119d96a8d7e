// Package auth authenticates and authorizes agentbus callers: API keys
// (random, shown once, stored only as SHA-256 hashes in a JetStream KV bucket
// every replica watches), short-lived bearer tokens issued by the OAuth2
// client-credentials grant, the operator's bootstrap key, per-credential
// rate limits, and the tenant and scope checks every operation goes through.
//
// It knows nothing of NATS (storage is the Store port, implemented by
// natsjs.KV) nor of any HTTP framework: credentials are read from a
// *http.Request, and the token endpoint is a plain http.Handler.
//
// Secrets are compared in constant time (hashes with crypto/subtle, token
// signatures by HMAC verification) and never logged: errors and log lines
// name a key by its id only.
package auth

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
)

// Method is how callers present credentials.
type Method string

// The authentication methods agentbus offers.
const (
	MethodNone         Method = "none"          // no credentials; every caller has every scope
	MethodBearer       Method = "bearer"        // Authorization: Bearer <token or API key>
	MethodAPIKeyHeader Method = "apikey-header" // <scheme>: <API key>
	MethodAPIKeyQuery  Method = "apikey-query"  // ?<scheme>=<API key>
)

// in returns where the method's credential goes: "header" or "query" ("" for
// none).
func (m Method) in() string {
	switch m {
	case MethodBearer, MethodAPIKeyHeader:
		return "header"
	case MethodAPIKeyQuery:
		return "query"
	}
	return ""
}

// Default header and query parameter names of the apiKey methods.
const (
	DefaultHeaderScheme = "X-API-Key"
	DefaultQueryScheme  = "api_key"
)

// ParseMethod checks s.
func ParseMethod(s string) (Method, error) {
	switch m := Method(s); m {
	case MethodNone, MethodBearer, MethodAPIKeyHeader, MethodAPIKeyQuery:
		return m, nil
	}
	return "", fmt.Errorf("auth.type %q: must be none, bearer, apikey-header or apikey-query", s)
}

// Scope is a permission a credential carries. The REST operations table
// names the scope each operation needs.
type Scope string

// The scopes. Admin is separate from read and write, not above them: it
// only allows event injection, and no key has it unless created with it.
const (
	ScopeRead  Scope = "read"  // GET routes: events, catalogues, registries, traces
	ScopeWrite Scope = "write" // commands, agent and service registry
	ScopeAdmin Scope = "admin" // POST /events (event injection)
)

// AllScopes lists every scope, in order.
var AllScopes = []Scope{ScopeRead, ScopeWrite, ScopeAdmin}

// joinScopes returns scopes space-separated, as the scope claim and the
// token response's scope have them (RFC 6749 §3.3).
func joinScopes(scopes []Scope) string {
	var b strings.Builder
	for i, s := range scopes {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(s))
	}
	return b.String()
}

// ParseScopes parses a list of scope names separated by commas or spaces.
// It rejects unknown names and an empty list; duplicates are dropped.
func ParseScopes(s string) ([]Scope, error) {
	var out []Scope
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		sc := Scope(f)
		if !slices.Contains(AllScopes, sc) {
			return nil, fmt.Errorf("unknown scope %q (read, write or admin)", f)
		}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scope given (read, write or admin)")
	}
	return out, nil
}

// AllTenants in a credential's tenant list means every tenant.
const AllTenants = "*"

// Principal is an authenticated caller.
type Principal struct {
	// ID identifies the credential: a key id (also for tokens issued to
	// that key), "bootstrap" or "anonymous". Rate limits are per ID.
	ID string
	// Kind is "key", "token", "bootstrap" or "anonymous".
	Kind    string
	Tenants []string
	Scopes  []Scope
	// Until is when a token's credential ends (its expiry); zero for the
	// other kinds.
	Until time.Time
}

// Credential kinds of Principal.Kind.
const (
	KindKey       = "key"
	KindToken     = "token"
	KindBootstrap = "bootstrap"
	KindAnonymous = "anonymous"
)

// HasTenant reports whether p may act on tenant.
func (p *Principal) HasTenant(tenant string) bool {
	return slices.Contains(p.Tenants, AllTenants) || slices.Contains(p.Tenants, tenant)
}

// HasScope reports whether p carries scope.
func (p *Principal) HasScope(s Scope) bool { return slices.Contains(p.Scopes, s) }

// Allow returns nil when p may run an operation needing scope on tenant,
// else a FORBIDDEN error that names neither p's tenants nor its scopes.
func (p *Principal) Allow(tenant string, scope Scope) error {
	if !p.HasTenant(tenant) {
		e := errs.New(errs.CodeForbidden, "this credential is not valid for tenant %q", tenant)
		e.Details = map[string]any{"reason": "tenant"}
		return e
	}
	if scope != "" && !p.HasScope(scope) {
		e := errs.New(errs.CodeForbidden, "this operation needs the %q scope, which this credential does not carry", scope)
		e.Details = map[string]any{"reason": "scope", "requiredScope": string(scope)}
		return e
	}
	return nil
}

// Reasons a credential is refused (details.reason of a 401).
const (
	ReasonMissing   = "missing"
	ReasonMalformed = "malformed"
	ReasonInvalid   = "invalid" // unknown key or token, or a wrong secret
	ReasonExpired   = "expired"
	ReasonRevoked   = "revoked"
)

// unauthenticated returns the 401 error of reason.
func unauthenticated(reason, format string, args ...any) *errs.Error {
	e := errs.New(errs.CodeUnauthenticated, format, args...)
	e.Details = map[string]any{"reason": reason}
	return e
}

// ReasonOf returns details.reason of an auth error, or "".
func ReasonOf(err error) string {
	e := errs.As(err)
	r, _ := e.Details["reason"].(string)
	return r
}
