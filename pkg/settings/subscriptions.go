package settings

import (
	"time"

	"github.com/agentbus/agentbus/pkg/secrets"
)

// Subscriptions tunes webhook subscriptions: how their signing secrets
// are kept, and how many a tenant may have.
type Subscriptions struct {
	// SecretKey encrypts the signing secrets at rest (AES-256-GCM): the
	// base64 of 32 bytes, e.g. from `openssl rand -base64 32`
	// [AGENTBUS_WEBHOOK_SECRET_KEY]. Empty (default): agentbus generates
	// one at its first start and keeps it in the AGENTBUS_SECRETS bucket
	// beside the secrets, and warns at every start. Keep it: secrets
	// encrypted with a key agentbus no longer has cannot sign.
	SecretKey Secret `json:"secretKey"`
	// RotationOverlap is how long a replaced secret keeps signing beside
	// the new one after a rotation (default 24h, 1m to 720h).
	RotationOverlap Duration `json:"rotationOverlap"`
}

// DefaultSubscriptions are the subscriptions' default settings.
var DefaultSubscriptions = Subscriptions{RotationOverlap: Duration(24 * time.Hour)}

func (c *Config) validateSubscriptions(bad func(string, ...any)) {
	s := c.Subscriptions
	if s.SecretKey != "" {
		if _, err := secrets.ParseKey(s.SecretKey.Reveal()); err != nil {
			bad("subscriptions.secretKey (AGENTBUS_WEBHOOK_SECRET_KEY): %v", err)
		}
	}
	if o := s.RotationOverlap.D(); o < time.Minute || o > 720*time.Hour {
		bad("subscriptions.rotationOverlap %s: must be 1m to 720h", o)
	}
}
