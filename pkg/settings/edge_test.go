package settings_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestValidateHTTPAndMemory: the connection, time, header and memory
// settings are refused out of range, naming the key.
func TestValidateHTTPAndMemory(t *testing.T) {
	t.Parallel()
	d := func(v time.Duration) settings.Duration { return settings.Duration(v) }
	for _, c := range []struct {
		name   string
		mutate func(*settings.Config)
		bad    string // "" = valid
	}{
		{"defaults", func(*settings.Config) {}, ""},
		{"no per-address cap", func(c *settings.Config) { c.HTTP.MaxConnectionsPerAddress = 0 }, ""},
		{"few connections", func(c *settings.Config) { c.HTTP.MaxConnections = 8 }, "http.maxConnections 8"},
		{"per address over total", func(c *settings.Config) { c.HTTP.MaxConnectionsPerAddress = 5000 }, "http.maxConnectionsPerAddress 5000"},
		{"negative per address", func(c *settings.Config) { c.HTTP.MaxConnectionsPerAddress = -1 }, "http.maxConnectionsPerAddress -1"},
		{"header of 1 KiB", func(c *settings.Config) { c.HTTP.HeaderBytes = 1024 }, "http.headerBytes 1024"},
		{"header of 8 MiB", func(c *settings.Config) { c.HTTP.HeaderBytes = 8 << 20 }, "http.headerBytes 8388608"},
		{"no idle timeout", func(c *settings.Config) { c.HTTP.IdleTimeout = 0 }, "http.idleTimeout 0s"},
		{"header timeout over read timeout", func(c *settings.Config) { c.HTTP.ReadHeaderTimeout = d(time.Minute) }, "http.readHeaderTimeout 1m0s: must not be more than http.readTimeout"},
		{"write timeout under the registry wait", func(c *settings.Config) { c.HTTP.WriteTimeout = d(5 * time.Second) }, "http.writeTimeout 5s: must be more than registry.waitTimeout (5s)"},
		{"short write timeout, shorter wait", func(c *settings.Config) {
			c.HTTP.WriteTimeout, c.Registry.WaitTimeout = d(2*time.Second), d(time.Second)
		}, ""},
		{"large heap", func(c *settings.Config) { c.Memory.Mode = settings.MemoryLargeHeap }, ""},
		{"unknown memory mode", func(c *settings.Config) { c.Memory.Mode = "huge" }, `memory.mode "huge"`},
		{"tiny budget", func(c *settings.Config) { c.Memory.Budget = 1 << 20 }, "memory.budget 1MiB"},
	} {
		cfg := settings.Default()
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
		m    settings.Memory
		want uint64
	}{
		{settings.DefaultMemory, 1 << 30},
		{settings.Memory{Mode: settings.MemoryLargeHeap}, 2 << 30},
		{settings.Memory{Mode: settings.MemoryLargeHeap, Budget: 1 << 30}, 1 << 30},
		{settings.Memory{Mode: settings.MemoryBudget, Budget: 256 << 20}, 256 << 20},
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
		want settings.Size
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
		got, err := settings.ParseSize(c.in)
		if err != nil || got != c.want || got.String() != c.text {
			t.Errorf("ParseSize(%q) = %d (%s), %v; want %d (%s)", c.in, got, got, err, c.want, c.text)
		}
	}
	for _, in := range []string{"", "lots", "-1MiB", "2GB", "1.5GiB", "99999999999PiB"} {
		if got, err := settings.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
	var s struct{ A, B settings.Size }
	if err := json.Unmarshal([]byte(`{"A": 1024, "B": "2GiB"}`), &s); err != nil || s.A != 1024 || s.B != 2<<30 {
		t.Errorf("unmarshal: %+v %v", s, err)
	}
	if err := json.Unmarshal([]byte(`{"A": -5}`), &s); err == nil {
		t.Error("a negative size was taken")
	}
	if b, _ := json.Marshal(settings.Size(384 << 20)); string(b) != `"384MiB"` {
		t.Errorf("marshal: %s", b)
	}
}

// TestExampleFileHasHTTPAndMemoryDefaults: the example configuration
// states the defaults of the connection, time, header and memory settings.
func TestExampleFileHasHTTPAndMemoryDefaults(t *testing.T) {
	t.Parallel()
	var cfg settings.Config
	if err := cfg.LoadFile("../../config/agentbus.example.yaml"); err != nil {
		t.Fatal(err)
	}
	if def := settings.Default(); cfg.HTTP != def.HTTP || cfg.Memory != def.Memory {
		t.Errorf("example file: http %+v, memory %+v; defaults %+v, %+v", cfg.HTTP, cfg.Memory, def.HTTP, def.Memory)
	}
}
