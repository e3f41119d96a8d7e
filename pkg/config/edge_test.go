package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
)

// TestValidateHTTP: the connection, time and header settings are refused
// out of range, naming the key.
func TestValidateHTTP(t *testing.T) {
	t.Parallel()
	d := func(v time.Duration) config.Duration { return config.Duration(v) }
	for _, c := range []struct {
		name   string
		mutate func(*config.Config)
		bad    string // "" = valid
	}{
		{"defaults", func(*config.Config) {}, ""},
		{"no per-address cap", func(c *config.Config) { c.HTTP.MaxConnectionsPerAddress = 0 }, ""},
		{"few connections", func(c *config.Config) { c.HTTP.MaxConnections = 8 }, "http.maxConnections 8"},
		{"per address over total", func(c *config.Config) { c.HTTP.MaxConnectionsPerAddress = 5000 }, "http.maxConnectionsPerAddress 5000"},
		{"negative per address", func(c *config.Config) { c.HTTP.MaxConnectionsPerAddress = -1 }, "http.maxConnectionsPerAddress -1"},
		{"header of 1 KiB", func(c *config.Config) { c.HTTP.HeaderBytes = 1024 }, "http.headerBytes 1024"},
		{"header of 8 MiB", func(c *config.Config) { c.HTTP.HeaderBytes = 8 << 20 }, "http.headerBytes 8388608"},
		{"no idle timeout", func(c *config.Config) { c.HTTP.IdleTimeout = 0 }, "http.idleTimeout 0s"},
		{"header timeout over read timeout", func(c *config.Config) { c.HTTP.ReadHeaderTimeout = d(time.Minute) }, "http.readHeaderTimeout 1m0s: must not be more than http.readTimeout"},
		{"write timeout under the registry wait", func(c *config.Config) { c.HTTP.WriteTimeout = d(5 * time.Second) }, "http.writeTimeout 5s: must be more than registry.waitTimeout (5s)"},
		{"short write timeout, shorter wait", func(c *config.Config) {
			c.HTTP.WriteTimeout, c.Registry.WaitTimeout = d(2*time.Second), d(time.Second)
		}, ""},
	} {
		cfg := config.Default()
		c.mutate(&cfg)
		err := cfg.Validate()
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%s: %v, want %q", c.name, err, c.bad)
		}
	}
}

// TestExampleFileHasHTTPDefaults: the example configuration states the
// defaults of the connection, time and header settings.
func TestExampleFileHasHTTPDefaults(t *testing.T) {
	t.Parallel()
	var cfg config.Config
	if err := cfg.LoadFile("../../config/agentbus.example.yaml"); err != nil {
		t.Fatal(err)
	}
	if def := config.Default(); cfg.HTTP != def.HTTP {
		t.Errorf("example file: http %+v; defaults %+v", cfg.HTTP, def.HTTP)
	}
}
