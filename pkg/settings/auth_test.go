package settings_test

import (
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/settings"
)

func TestInsecureListen(t *testing.T) {
	t.Parallel()
	cases := []struct {
		listen, nats, auth string
		override           bool
		bad                string
	}{
		{listen: "127.0.0.1:8080", auth: "none"},
		{listen: "localhost:8080", auth: "none"},
		{listen: "[::1]:8080", auth: "none"},
		{listen: "127.0.0.2:8080", auth: "none"},
		{listen: "0.0.0.0:8080", auth: "none", bad: "allowInsecureListen"},
		{listen: ":8080", auth: "none", bad: "allowInsecureListen"},
		{listen: "[::]:8080", auth: "none", bad: "allowInsecureListen"},
		{listen: "10.1.2.3:8080", auth: "none", bad: "allowInsecureListen"},
		{listen: "agentbus.internal:8080", auth: "none", bad: "allowInsecureListen"},
		{listen: "0.0.0.0:8080", auth: "none", override: true},
		{listen: "0.0.0.0:8080", auth: "bearer"},
		{listen: "0.0.0.0:8080", auth: "apikey-query"},
		{listen: "127.0.0.1:8080", nats: "0.0.0.0:4222", auth: "bearer", bad: "embedded NATS"},
		{listen: "127.0.0.1:8080", nats: "0.0.0.0:4222", auth: "bearer", override: true},
		{listen: "127.0.0.1:8080", auth: "basic", bad: "auth.type"},
	}
	for _, c := range cases {
		cfg := settings.Default()
		cfg.Listen, cfg.Auth.Type, cfg.Auth.AllowInsecureListen = c.listen, c.auth, c.override
		if c.nats != "" {
			cfg.NATS.Listen = &c.nats
		}
		err := cfg.Validate()
		if (err != nil) != (c.bad != "") || (err != nil && !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestAuthSettings(t *testing.T) {
	t.Parallel()
	for name, mutate := range map[string]func(*settings.Config){
		"short bootstrap key": func(c *settings.Config) { c.Auth.BootstrapKey = "short" },
		"spaces in bootstrap": func(c *settings.Config) { c.Auth.BootstrapKey = "a bootstrap key with spaces" },
		"short signing key":   func(c *settings.Config) { c.Auth.TokenSigningKey = "short" },
		"token TTL":           func(c *settings.Config) { c.Auth.TokenTTL = settings.Duration(1) },
		"query scheme":        func(c *settings.Config) { c.Auth.Type, c.Auth.Scheme = "apikey-query", "a b" },
		"negative rate":       func(c *settings.Config) { c.Limits.Rate.PerSecond = -1 },
	} {
		cfg := settings.Default()
		mutate(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestAuthMessages: refusals name the setting.
func TestAuthMessages(t *testing.T) {
	t.Parallel()
	for want, mutate := range map[string]func(*settings.Config){
		"auth.bootstrapKey":    func(c *settings.Config) { c.Auth.BootstrapKey = settings.Secret(strings.Repeat("k", 513)) },
		"auth.tokenSigningKey": func(c *settings.Config) { c.Auth.TokenSigningKey = settings.Secret(strings.Repeat("k", 31)) },
		`auth.type "Bearer"`:   func(c *settings.Config) { c.Auth.Type = "Bearer" },
	} {
		cfg := settings.Default()
		mutate(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", want, err)
		}
	}
	cfg := settings.Default()
	cfg.Auth.BootstrapKey = settings.Secret(strings.Repeat("k", 16))
	cfg.Auth.TokenSigningKey = settings.Secret(strings.Repeat("k", 32))
	if err := cfg.Validate(); err != nil {
		t.Fatalf("shortest keys: %v", err)
	}
}

func TestTenantIDs(t *testing.T) {
	t.Parallel()
	for id, ok := range map[string]bool{"acme": true, "a": true, "0-a": true, strings.Repeat("a", 63): true,
		"": false, "-acme": false, "Acme": false, "a_b": false, "a.b": false, strings.Repeat("a", 64): false} {
		cfg := settings.Default()
		cfg.Tenancy.Mode, cfg.Tenancy.Tenants = "multi", []string{id}
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("tenant %q: %v", id, err)
		}
	}
}

func TestSecretsMasked(t *testing.T) {
	t.Parallel()
	s := settings.Secret("hunter2-hunter2-hunter2")
	if s.String() != "***" || s.LogValue().String() != "***" || s.Reveal() != "hunter2-hunter2-hunter2" {
		t.Fatal("secret shown")
	}
	b, _ := s.MarshalJSON()
	if string(b) != `"***"` {
		t.Fatalf("marshal: %s", b)
	}
}
