package settings_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestWebhookSettings: the defaults (private targets off, 15s, 64 KiB),
// the bounds of each setting, named in the error, and the file's keys.
func TestWebhookSettings(t *testing.T) {
	t.Parallel()
	def := settings.Default()
	if w := def.Webhooks; w.AllowPrivate || w.Timeout.D() != 15*time.Second || w.MaxResponseBytes != 64<<10 {
		t.Errorf("defaults %+v; want private targets off, 15s, 65536", w)
	}
	d := func(v time.Duration) settings.Duration { return settings.Duration(v) }
	for _, c := range []struct {
		name   string
		mutate func(*settings.Webhooks)
		bad    string // the problem expected; "" = valid
	}{
		{"private allowed", func(w *settings.Webhooks) { w.AllowPrivate = true }, ""},
		{"shortest timeout", func(w *settings.Webhooks) { w.Timeout = d(10 * time.Millisecond) }, ""},
		{"longest timeout", func(w *settings.Webhooks) { w.Timeout = d(5 * time.Minute) }, ""},
		{"no timeout", func(w *settings.Webhooks) { w.Timeout = 0 }, "webhooks.timeout 0s: must be 10ms to 5m"},
		{"timeout too long", func(w *settings.Webhooks) { w.Timeout = d(time.Hour) }, "webhooks.timeout 1h0m0s"},
		{"no body read", func(w *settings.Webhooks) { w.MaxResponseBytes = 0 }, ""},
		{"largest body", func(w *settings.Webhooks) { w.MaxResponseBytes = 16 << 20 }, ""},
		{"negative body", func(w *settings.Webhooks) { w.MaxResponseBytes = -1 }, "webhooks.maxResponseBytes -1"},
		{"body too large", func(w *settings.Webhooks) { w.MaxResponseBytes = 16<<20 + 1 }, "webhooks.maxResponseBytes 16777217: must be 0 to 16777216"},
	} {
		cfg := settings.Default()
		c.mutate(&cfg.Webhooks)
		err := cfg.Validate()
		if (err != nil) != (c.bad != "") || err != nil && !strings.Contains(err.Error(), c.bad) {
			t.Errorf("%s: %v; want %q", c.name, err, c.bad)
		}
	}

	cfg, _, err := loadFile(t, "webhooks:\n  allowPrivate: true\n  timeout: 2s\n  maxResponseBytes: 1024\n")
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Webhooks; !w.AllowPrivate || w.Timeout.D() != 2*time.Second || w.MaxResponseBytes != 1024 {
		t.Errorf("loaded %+v", w)
	}
	if _, _, err := loadFile(t, "webhooks:\n  allowprivate: true\n"); err == nil || !strings.Contains(err.Error(), `did you mean "allowPrivate"`) {
		t.Errorf("a key in another case: %v", err)
	}
}

// TestExampleConfigWebhooks: config/agentbus.example.yaml, which lists
// every setting with its default, loads to the defaults for webhooks.
func TestExampleConfigWebhooks(t *testing.T) {
	t.Parallel()
	cfg := settings.Default()
	cfg.Webhooks = settings.Webhooks{}
	if err := cfg.LoadFile("../../config/agentbus.example.yaml"); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Webhooks, settings.DefaultWebhooks) {
		t.Errorf("the example file's webhooks block is %+v; the defaults are %+v", cfg.Webhooks, settings.DefaultWebhooks)
	}
}
