package settings_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestAuthLimits: the defaults are on and valid; refusals name the
// setting; the file keys load.
func TestAuthLimits(t *testing.T) {
	t.Parallel()
	d := settings.Default().AuthLimits
	if d.Failures.PerSecond <= 0 || d.Failures.Burst <= 0 || d.Tokens.PerSecond <= 0 || d.Tokens.Burst <= 0 ||
		d.LogInterval.D() != time.Minute || len(d.TrustedProxies) != 0 {
		t.Fatalf("defaults %+v", d)
	}
	for _, c := range []struct {
		name   string
		mutate func(*settings.AuthLimits)
		bad    string // "" = valid
	}{
		{"throttle off", func(l *settings.AuthLimits) { l.Failures, l.Tokens = settings.Rate{}, settings.Rate{} }, ""},
		{"negative failures", func(l *settings.AuthLimits) { l.Failures.PerSecond = -1 }, "authLimits.failures"},
		{"failures below one a day", func(l *settings.AuthLimits) { l.Failures.PerSecond = 1e-9 }, "authLimits.failures"},
		{"negative token burst", func(l *settings.AuthLimits) { l.Tokens.Burst = -1 }, "authLimits.tokens"},
		{"short log interval", func(l *settings.AuthLimits) { l.LogInterval = settings.Duration(time.Millisecond) }, "authLimits.logInterval 1ms"},
		{"long log interval", func(l *settings.AuthLimits) { l.LogInterval = settings.Duration(48 * time.Hour) }, "authLimits.logInterval"},
		{"proxies", func(l *settings.AuthLimits) { l.TrustedProxies = []string{"10.0.0.0/8", "192.0.2.1", "2001:db8::/32"} }, ""},
		{"bad proxy", func(l *settings.AuthLimits) { l.TrustedProxies = []string{"10.0.0.0/8", "proxy.internal"} }, `authLimits.trustedProxies: "proxy.internal"`},
	} {
		cfg := settings.Default()
		c.mutate(&cfg.AuthLimits)
		err := cfg.Validate()
		if (err != nil) != (c.bad != "") || (err != nil && !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}

	cfg, _, err := loadFile(t, "authLimits:\n  failures: {perSecond: 0.5, burst: 10}\n  tokens: {perSecond: 2, burst: 5}\n  logInterval: 30s\n  trustedProxies: [10.0.0.0/8]\n")
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.AuthLimits
	if l.Failures != (settings.Rate{PerSecond: 0.5, Burst: 10}) || l.Tokens != (settings.Rate{PerSecond: 2, Burst: 5}) ||
		l.LogInterval.D() != 30*time.Second || len(l.TrustedProxies) != 1 || cfg.Validate() != nil {
		t.Fatalf("loaded %+v: %v", l, cfg.Validate())
	}
}
