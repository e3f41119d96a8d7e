package auth

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
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/golang-jwt/jwt/v5"
)

// Bearer tokens are JWTs (RFC 7519, compact form) signed with HS256 under a
// secret every replica shares. Claims: iss and aud (the public endpoint),
// sub (the key id, or "bootstrap"), iat, exp, jti, tenants and scope
// (space-separated, as in RFC 9068), and for the bootstrap key bkey, which
// names the bootstrap key that issued the token (an HMAC of its hash under
// the signing secret) so that replacing the key revokes its tokens.

// MinSigningKeyLen is the shortest accepted signing secret, in bytes.
const MinSigningKeyLen = 32

// signingKeyName is the store key of the shared signing secret.
const signingKeyName = "signing.hs256"

// SigningKey returns the token signing secret shared by every replica:
// the one in the store, or a fresh random one stored with create-if-absent
// so that concurrent first starts agree on one secret.
func SigningKey(ctx context.Context, kv bus.KV) ([]byte, error) {
	for range 3 {
		raw, _, err := kv.Get(ctx, signingKeyName)
		if err == nil {
			key, derr := base64.RawStdEncoding.DecodeString(string(raw))
			if derr != nil || len(key) < MinSigningKeyLen {
				return nil, errors.New("the stored token signing secret is unusable; delete " + signingKeyName + " from the keys bucket to generate a new one")
			}
			return key, nil
		}
		if !errors.Is(err, errs.ErrNotFound) {
			return nil, fmt.Errorf("read token signing secret: %w", err)
		}
		fresh := make([]byte, 32)
		if _, err := rand.Read(fresh); err != nil {
			return nil, err
		}
		_, err = kv.Create(ctx, signingKeyName, []byte(base64.RawStdEncoding.EncodeToString(fresh)))
		if err == nil {
			return fresh, nil
		}
		if !errors.Is(err, errs.ErrConflict) {
			return nil, fmt.Errorf("store token signing secret: %w", err)
		}
	}
	return nil, errors.New("cannot agree on a token signing secret")
}

// bootstrapTag returns the bkey claim of the bootstrap key whose SHA-256
// is hash: an HMAC of the hash under the signing secret, so the claim
// tells nothing about the key to whoever reads the token.
func bootstrapTag(signingKey, hash []byte) string {
	m := hmac.New(sha256.New, signingKey)
	m.Write([]byte("agentbus bootstrap key\x00"))
	m.Write(hash)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// tokenClaims are the claims of an agentbus bearer token.
type tokenClaims struct {
	jwt.RegisteredClaims
	Tenants []string `json:"tenants"`
	Scope   string   `json:"scope"`
	// BootstrapKey names the bootstrap key of a bootstrap token.
	BootstrapKey string `json:"bkey,omitempty"`

	scopes []Scope // Scope parsed
}

// tokens issues and verifies bearer tokens. Verified tokens are
// remembered (by SHA-256 of the whole token, with their expiry), so a
// token is parsed and its signature checked once, not on every request.
type tokens struct {
	key    []byte
	issuer string
	ttl    time.Duration
	now    func() time.Time
	parser *jwt.Parser

	mu       sync.Mutex
	verified map[[32]byte]*tokenClaims
}

// leeway is the clock skew tolerated on iat and exp.
const leeway = 5 * time.Second

// maxVerified bounds the verified-token cache; it is cleared when full.
const maxVerified = 50000

func newTokens(key []byte, issuer string, ttl time.Duration, now func() time.Time) *tokens {
	return &tokens{key: key, issuer: issuer, ttl: ttl, now: now, verified: map[[32]byte]*tokenClaims{},
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithIssuer(issuer), jwt.WithAudience(issuer),
			jwt.WithExpirationRequired(), jwt.WithIssuedAt(),
			jwt.WithLeeway(leeway), jwt.WithTimeFunc(now),
			jwt.WithStrictDecoding(),
		)}
}

// issue returns a signed token for subject with tenants and scopes;
// bootstrapKey is the bkey claim ("" for none).
func (t *tokens) issue(subject string, tenants []string, scopes []Scope, bootstrapKey string) (string, time.Time, error) {
	now := t.now().UTC().Truncate(time.Second)
	exp := now.Add(t.ttl)
	var jti [12]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", time.Time{}, err
	}
	c := tokenClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: t.issuer, Subject: subject, Audience: jwt.ClaimStrings{t.issuer},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
			ID: base64.RawURLEncoding.EncodeToString(jti[:]),
		},
		Tenants: tenants, Scope: joinScopes(scopes), BootstrapKey: bootstrapKey,
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(t.key)
	return s, exp, err
}

// verify checks a token's signature and claims and returns them, or an
// UNAUTHENTICATED error (expired when only the expiry is wrong).
func (t *tokens) verify(raw string) (*tokenClaims, error) {
	if len(raw) > maxCredentialLen {
		return nil, unauthenticated(ReasonMalformed, "the bearer token is too long")
	}
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
		return nil, unauthenticated(ReasonExpired, "the bearer token expired")
	}
	var c tokenClaims
	_, err := t.parser.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return t.key, nil })
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrTokenMalformed):
		return nil, unauthenticated(ReasonMalformed, "the bearer token is malformed")
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, unauthenticated(ReasonExpired, "the bearer token expired")
	default:
		return nil, unauthenticated(ReasonInvalid, "the bearer token is not valid")
	}
	if c.Subject == "" || c.Scope == "" || len(c.Tenants) == 0 {
		return nil, unauthenticated(ReasonInvalid, "the bearer token is not valid")
	}
	if c.scopes, err = ParseScopes(c.Scope); err != nil {
		return nil, unauthenticated(ReasonInvalid, "the bearer token is not valid")
	}
	t.mu.Lock()
	if len(t.verified) >= maxVerified {
		clear(t.verified)
	}
	t.verified[h] = &c
	t.mu.Unlock()
	return &c, nil
}

// looksLikeJWT reports whether s has the shape of a compact JWS: three
// non-empty base64url parts.
func looksLikeJWT(s string) bool {
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
