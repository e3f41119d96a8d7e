// Package bearer issues and verifies agentbus bearer tokens: the signing
// secret every replica shares, signing and checking tokens, and the cache
// of tokens already checked. It knows scopes only as the raw scope claim
// and fails with its own sentinel errors; pkg/auth turns those into the
// caller's answer.
package bearer

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/golang-jwt/jwt/v5"
)

// Bearer tokens are JWTs (RFC 7519, compact form) signed with HS256 under a
// secret every replica shares. Claims: iss and aud (the public endpoint),
// sub (the key id, or "bootstrap"), iat, exp, jti, tenants and scope
// (space-separated, as in RFC 9068), and for the bootstrap key bkey, which
// names the bootstrap key that issued the token (an HMAC of its hash under
// the signing secret) so that replacing the key revokes its tokens.

// The errors of Verify.
var (
	ErrMalformed = errors.New("bearer: the token is malformed")
	ErrExpired   = errors.New("bearer: the token expired")
	ErrInvalid   = errors.New("bearer: the token is not valid")
)

// MinSigningKeyLen is the shortest accepted signing secret, in bytes.
const MinSigningKeyLen = 32

// signingKeyName is the store key of the shared signing secret.
const signingKeyName = "signing.hs256"

// SigningKey returns the token signing secret shared by every replica:
// the one in the store, or a fresh random one stored with create-if-absent
// so that concurrent first starts agree on one secret.
func SigningKey(ctx context.Context, kv bus.KV) ([]byte, error) {
	key, err := bus.AgreedKey(ctx, kv, signingKeyName, MinSigningKeyLen)
	if errors.Is(err, bus.ErrUnusableKey) {
		return nil, errors.New("the stored token signing secret is unusable; delete " + signingKeyName + " from the keys bucket to generate a new one")
	}
	if err != nil {
		return nil, fmt.Errorf("token signing secret: %w", err)
	}
	return key, nil
}

// BootstrapTag returns the bkey claim of the bootstrap key whose SHA-256
// is hash: an HMAC of the hash under the signing secret, so the claim
// tells nothing about the key to whoever reads the token.
func BootstrapTag(signingKey, hash []byte) string {
	m := hmac.New(sha256.New, signingKey)
	m.Write([]byte("agentbus bootstrap key\x00"))
	m.Write(hash)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// Claims are the claims of an agentbus bearer token.
type Claims struct {
	jwt.RegisteredClaims
	Tenants []string `json:"tenants"`
	// Scope is the space-separated scope claim.
	Scope string `json:"scope"`
	// BootstrapKey names the bootstrap key of a bootstrap token.
	BootstrapKey string `json:"bkey,omitempty"`
}

// Tokens issues and verifies bearer tokens. Verified tokens are
// remembered (by SHA-256 of the whole token, with their expiry), so a
// token is parsed and its signature checked once, not on every request.
// Safe for concurrent use.
type Tokens struct {
	key        []byte
	issuer     string
	ttl        time.Duration
	now        func() time.Time
	checkScope func(string) error
	parser     *jwt.Parser

	mu       sync.Mutex
	verified map[[32]byte]*Claims
}

// leeway is the clock skew tolerated on iat and exp.
const leeway = 5 * time.Second

// maxVerified bounds the verified-token cache; it is cleared when full.
const maxVerified = 50000

// New returns the tokens signed with key, whose issuer and audience are
// issuer, living ttl on the clock now. checkScope vets a token's scope
// claim before the token is accepted (and remembered); a claim it refuses
// makes the token invalid.
func New(key []byte, issuer string, ttl time.Duration, now func() time.Time, checkScope func(string) error) *Tokens {
	return &Tokens{key: key, issuer: issuer, ttl: ttl, now: now, checkScope: checkScope, verified: map[[32]byte]*Claims{},
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithIssuer(issuer), jwt.WithAudience(issuer),
			jwt.WithExpirationRequired(), jwt.WithIssuedAt(),
			jwt.WithLeeway(leeway), jwt.WithTimeFunc(now),
			jwt.WithStrictDecoding(),
		)}
}

// Issue returns a signed token for subject with tenants and scope (the
// space-separated claim), and its expiry; bootstrapKey is the bkey claim
// ("" for none).
func (t *Tokens) Issue(subject string, tenants []string, scope, bootstrapKey string) (string, time.Time, error) {
	now := t.now().UTC().Truncate(time.Second)
	exp := now.Add(t.ttl)
	var jti [12]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", time.Time{}, err
	}
	c := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: t.issuer, Subject: subject, Audience: jwt.ClaimStrings{t.issuer},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
			ID: base64.RawURLEncoding.EncodeToString(jti[:]),
		},
		Tenants: tenants, Scope: scope, BootstrapKey: bootstrapKey,
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(t.key)
	return s, exp, err
}

// Verify checks a token's signature and claims and returns them (shared
// with later calls: not to be modified), or ErrMalformed, ErrExpired
// (when only the expiry is wrong) or ErrInvalid.
func (t *Tokens) Verify(raw string) (*Claims, error) {
	h := sha256.Sum256([]byte(raw))
	t.mu.Lock()
	hit := t.verified[h]
	t.mu.Unlock()
	if hit != nil {
		if t.now().Before(hit.ExpiresAt.Add(leeway)) {
			return hit, nil
		}
		t.mu.Lock()
		delete(t.verified, h)
		t.mu.Unlock()
		return nil, ErrExpired
	}
	var c Claims
	_, err := t.parser.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return t.key, nil })
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrTokenMalformed):
		return nil, ErrMalformed
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, ErrExpired
	default:
		return nil, ErrInvalid
	}
	if c.Subject == "" || c.Scope == "" || len(c.Tenants) == 0 {
		return nil, ErrInvalid
	}
	if t.checkScope != nil && t.checkScope(c.Scope) != nil {
		return nil, ErrInvalid
	}
	t.mu.Lock()
	if len(t.verified) >= maxVerified {
		clear(t.verified)
	}
	t.verified[h] = &c
	t.mu.Unlock()
	return &c, nil
}

// LooksLikeJWT reports whether s has the shape of a compact JWS: three
// non-empty base64url parts.
func LooksLikeJWT(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" {
			return false
		}
		for i := 0; i < len(p); i++ {
			c := p[i]
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
