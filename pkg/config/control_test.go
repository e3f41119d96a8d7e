package config_test

import (
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
)

// TestValidateQuotas: the quotas and the bounds of registrations are
// refused out of range, naming the key.
func TestValidateQuotas(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(*config.Config)
		bad    string // "" = valid
	}{
		{"defaults", func(c *config.Config) {}, ""},
		{"types at least 8", func(c *config.Config) { c.Quotas.RegistrationTypes = 8 }, ""},
		{"types at most 1024", func(c *config.Config) { c.Quotas.RegistrationTypes = 1024 }, ""},
		{"types too few", func(c *config.Config) { c.Quotas.RegistrationTypes = 7 }, "quotas.registrationTypes 7: must be 8 to 1024"},
		{"types too many", func(c *config.Config) { c.Quotas.RegistrationTypes = 1025 }, "quotas.registrationTypes 1025"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			c.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case c.bad == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
				t.Fatalf("err = %v, want %q", err, c.bad)
			}
		})
	}
}
