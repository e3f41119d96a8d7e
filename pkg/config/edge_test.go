package config_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
)

// TestValidateHTTPAndMemory: the connection, time, header and memory
// settings are refused out of range, naming the key.
func TestValidateHTTPAndMemory(t *testing.T) {
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
		{"large heap", func(c *config.Config) { c.Memory.Mode = config.MemoryLargeHeap }, ""},
		{"unknown memory mode", func(c *config.Config) { c.Memory.Mode = "huge" }, `memory.mode "huge"`},
		{"tiny budget", func(c *config.Config) { c.Memory.Budget = 1 << 20 }, "memory.budget 1MiB"},
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

func TestMemoryBytes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m    config.Memory
		want uint64
	}{
		{config.DefaultMemory, 384 << 20},
		{config.Memory{Mode: config.MemoryLargeHeap}, 2 << 30},
		{config.Memory{Mode: config.MemoryLargeHeap, Budget: 1 << 30}, 1 << 30},
		{config.Memory{Mode: config.MemoryBudget, Budget: 256 << 20}, 256 << 20},
	} {
		if got := c.m.Bytes(); got != c.want {
			t.Errorf("%+v: %d, want %d", c.m, got, c.want)
		}
	}
}

func TestSize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want config.Size
		text string
	}{
		{"384MiB", 384 << 20, "384MiB"},
		{"2GiB", 2 << 30, "2GiB"},
		{" 512 KiB ", 512 << 10, "512KiB"},
		{"1048576", 1 << 20, "1MiB"},
		{"1000B", 1000, "1000"},
		{"0", 0, "0"},
		{"1536MiB", 1536 << 20, "1536MiB"},
	} {
		got, err := config.ParseSize(c.in)
		if err != nil || got != c.want || got.String() != c.text {
			t.Errorf("ParseSize(%q) = %d (%s), %v; want %d (%s)", c.in, got, got, err, c.want, c.text)
		}
	}
	for _, in := range []string{"", "lots", "-1MiB", "2GB", "1.5GiB", "99999999999PiB"} {
		if got, err := config.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
	var s struct{ A, B config.Size }
	if err := json.Unmarshal([]byte(`{"A": 1024, "B": "2GiB"}`), &s); err != nil || s.A != 1024 || s.B != 2<<30 {
		t.Errorf("unmarshal: %+v %v", s, err)
	}
	if err := json.Unmarshal([]byte(`{"A": -5}`), &s); err == nil {
		t.Error("a negative size was taken")
	}
	if b, _ := json.Marshal(config.Size(384 << 20)); string(b) != `"384MiB"` {
		t.Errorf("marshal: %s", b)
	}
}

// TestExampleFileHasHTTPAndMemoryDefaults: the example configuration
// states the defaults of the connection, time, header and memory settings.
func TestExampleFileHasHTTPAndMemoryDefaults(t *testing.T) {
	t.Parallel()
	var cfg config.Config
	if err := cfg.LoadFile("../../config/agentbus.example.yaml"); err != nil {
		t.Fatal(err)
	}
	if def := config.Default(); cfg.HTTP != def.HTTP || cfg.Memory != def.Memory {
		t.Errorf("example file: http %+v, memory %+v; defaults %+v, %+v", cfg.HTTP, cfg.Memory, def.HTTP, def.Memory)
	}
}
