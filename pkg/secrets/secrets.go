// Package secrets keeps the signing secrets of webhook subscriptions:
// given or generated (Standard Webhooks "whsec_" form), encrypted at rest
// with AES-256-GCM, and rotated with an overlap during which the previous
// secret still signs. It stores through a bus.KV (the AGENTBUS_SECRETS
// bucket) and imports nothing of NATS.
//
// A secret never appears in an error, a log line or a command or event:
// errors here name the subscription, never its secret.
package secrets

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

// Prefix begins the Standard Webhooks form of a secret: "whsec_" and the
// base64 of its key bytes.
const Prefix = "whsec_"

// Bounds of a secret: the key of a whsec_ secret is 24 to 64 bytes; any
// other secret is 24 to 256 printable ASCII characters, used as they are.
const (
	MinKeyBytes = 24
	MaxKeyBytes = 64
	MinLen      = 24
	MaxLen      = 256
)

// generatedBytes is the size of the key of a generated secret.
const generatedBytes = 32

// Generate returns a new random secret: "whsec_" and the base64 of 32
// random bytes.
func Generate() (string, error) {
	b := make([]byte, generatedBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate a secret: %w", err)
	}
	return Prefix + base64.StdEncoding.EncodeToString(b), nil
}

// Problem says what makes secret unusable, without quoting it, or returns
// "": 24 to 256 printable ASCII characters without spaces and, when it
// starts with "whsec_", the base64 of 24 to 64 bytes after it.
func Problem(secret string) string {
	if len(secret) < MinLen || len(secret) > MaxLen {
		return fmt.Sprintf("must be %d to %d characters", MinLen, MaxLen)
	}
	for i := 0; i < len(secret); i++ {
		if c := secret[i]; c <= ' ' || c > '~' {
			return "must be printable ASCII characters without spaces"
		}
	}
	if rest, ok := strings.CutPrefix(secret, Prefix); ok {
		key, err := decodeBase64(rest)
		if err != nil {
			return "after whsec_ must come base64"
		}
		if len(key) < MinKeyBytes || len(key) > MaxKeyBytes {
			return fmt.Sprintf("after whsec_ must come the base64 of %d to %d bytes", MinKeyBytes, MaxKeyBytes)
		}
	}
	return ""
}

// SigningKey is the HMAC key a secret signs with: for a whsec_ secret the
// bytes its base64 encodes (as Standard Webhooks says), for any other the
// secret's own bytes. It expects a secret Problem accepts.
func SigningKey(secret string) []byte {
	if rest, ok := strings.CutPrefix(secret, Prefix); ok {
		if key, err := decodeBase64(rest); err == nil {
			return key
		}
	}
	return []byte(secret)
}

// decodeBase64 decodes standard base64, padded or not.
func decodeBase64(s string) ([]byte, error) {
	return base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
}

// ParseKey reads an encryption key as configuration gives it: the base64
// (standard or URL alphabet, padded or not) of exactly 32 bytes. Its error
// does not quote the value.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil {
			if len(k) != keyBytes {
				return nil, fmt.Errorf("the key is %d bytes; it must be the base64 of exactly %d (e.g. openssl rand -base64 32)", len(k), keyBytes)
			}
			return k, nil
		}
	}
	return nil, fmt.Errorf("the key is not base64; it must be the base64 of exactly %d bytes (e.g. openssl rand -base64 32)", keyBytes)
}
