package settings_test

import (
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestValidateQuotas: the quotas and the bounds of registrations are
// refused out of range, naming the key.
func TestValidateQuotas(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(*settings.Config)
		bad    string // "" = valid
	}{
		{"defaults", func(c *settings.Config) {}, ""},
		{"types at least 8", func(c *settings.Config) { c.Quotas.RegistrationTypes = 8 }, ""},
		{"types at most 1024", func(c *settings.Config) { c.Quotas.RegistrationTypes = 1024 }, ""},
		{"types too few", func(c *settings.Config) { c.Quotas.RegistrationTypes = 7 }, "quotas.registrationTypes 7: must be 8 to 1024"},
		{"types too many", func(c *settings.Config) { c.Quotas.RegistrationTypes = 1025 }, "quotas.registrationTypes 1025"},
		{"no agents", func(c *settings.Config) { c.Quotas.Agents = 0 }, "quotas.agents 0: must be 1 to 100000"},
		{"too many services", func(c *settings.Config) { c.Quotas.Services = 100_001 }, "quotas.services 100001"},
		{"no subscriptions", func(c *settings.Config) { c.Quotas.Subscriptions = 0 }, "quotas.subscriptions 0"},
		{"consumers planned", func(c *settings.Config) { c.Quotas.CommandConsumers = 0 }, ""},
		{"consumers set", func(c *settings.Config) { c.Quotas.CommandConsumers = settings.ReservedConsumers + 1 }, ""},
		{"consumers all reserved", func(c *settings.Config) { c.Quotas.CommandConsumers = settings.ReservedConsumers }, "quotas.commandConsumers 64: must be 0"},
		{"negative consumers", func(c *settings.Config) { c.Quotas.CommandConsumers = -1 }, "quotas.commandConsumers -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := settings.Default()
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

// TestPlannedCommandConsumers: the command stream is planned for every
// tenant's agents plus the reserve, unless set.
func TestPlannedCommandConsumers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(*settings.Config)
		want   int
	}{
		{"single tenant", func(c *settings.Config) {}, 100 + settings.ReservedConsumers},
		{"three tenants", func(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"a", "b", "c"} }, 300 + settings.ReservedConsumers},
		{"multi without tenants", func(c *settings.Config) { c.Tenancy.Mode = "multi" }, 100 + settings.ReservedConsumers},
		{"open tenants", func(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Open = "multi", true }, 1000 + settings.ReservedConsumers},
		{"open, many listed", func(c *settings.Config) {
			c.Tenancy.Mode, c.Tenancy.Open, c.Tenancy.Tenants = "multi", true, []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
		}, 1200 + settings.ReservedConsumers},
		{"quota of agents", func(c *settings.Config) { c.Quotas.Agents = 7 }, 7 + settings.ReservedConsumers},
		{"set", func(c *settings.Config) { c.Quotas.CommandConsumers = 5000 }, 5000},
	}
	for _, c := range cases {
		cfg := settings.Default()
		c.mutate(&cfg)
		if got := cfg.PlannedCommandConsumers(); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
