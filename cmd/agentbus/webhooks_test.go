package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAllowPrivateWebhooks: the operator switch is off by default and set
// by the config file, AGENTBUS_ALLOW_PRIVATE_WEBHOOKS over the file, and
// --allow-private-webhooks over both; an unreadable value names the
// variable.
func TestAllowPrivateWebhooks(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agentbus.yaml")
	if err := os.WriteFile(file, []byte("webhooks:\n  allowPrivate: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  string // "" = unset
		args []string
		want bool
	}{
		{"", nil, false},
		{"", []string{"--allow-private-webhooks"}, true},
		{"true", nil, true},
		{"1", nil, true},
		{"false", []string{"--allow-private-webhooks"}, true},
		{"", []string{"--config", file}, true},
		{"false", []string{"--config", file}, false},
	} {
		t.Setenv("AGENTBUS_ALLOW_PRIVATE_WEBHOOKS", c.env)
		if c.env == "" {
			os.Unsetenv("AGENTBUS_ALLOW_PRIVATE_WEBHOOKS")
		}
		cfg, err := loadConfig(newFlags("serve", serveSynopsis, io.Discard), c.args)
		if err != nil || cfg.Webhooks.AllowPrivate != c.want {
			t.Errorf("env %q, args %q: %v, allowPrivate %v; want %v", c.env, c.args, err, cfg.Webhooks.AllowPrivate, c.want)
		}
	}
	t.Setenv("AGENTBUS_ALLOW_PRIVATE_WEBHOOKS", "yes")
	if _, err := loadConfig(newFlags("serve", serveSynopsis, io.Discard), nil); err == nil || !strings.Contains(err.Error(), "AGENTBUS_ALLOW_PRIVATE_WEBHOOKS") {
		t.Errorf("AGENTBUS_ALLOW_PRIVATE_WEBHOOKS=yes: %v; want an error naming the variable", err)
	}
}
