package main

import (
	"os"

	"github.com/agentbus/agentbus/pkg/settings"
)

// applySubscriptionEnv applies the subscription settings that come from
// the environment only: the secrets' encryption key, kept out of flags
// (and so out of process listings).
func applySubscriptionEnv(cfg *settings.Config) {
	if v, ok := os.LookupEnv("AGENTBUS_WEBHOOK_SECRET_KEY"); ok {
		cfg.Subscriptions.SecretKey = settings.Secret(v)
	}
}
