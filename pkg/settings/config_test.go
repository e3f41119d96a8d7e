package settings_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestValidateNATSAndStreams: settings NATS would refuse with a raw API
// error, or silently ignore, are refused up front, naming the key.
func TestValidateNATSAndStreams(t *testing.T) {
	t.Parallel()
	d := func(v time.Duration) settings.Duration { return settings.Duration(v) }
	external := func(c *settings.Config) { c.NATS.URL = "nats://nats.internal:4222" }
	cases := []struct {
		name   string
		mutate func(*settings.Config)
		bad    []string // every problem expected; none = valid
	}{
		{"max ages forever", func(c *settings.Config) { c.Streams.CommandMaxAge, c.Streams.EventMaxAge = 0, 0 }, nil},
		{"command max age equal window", func(c *settings.Config) { c.Streams.CommandMaxAge = d(30 * time.Second) }, nil},
		{"command max age under window", func(c *settings.Config) { c.Streams.CommandMaxAge = d(20 * time.Second) }, []string{"streams.commandMaxAge"}},
		{"command max age under a shorter window", func(c *settings.Config) {
			c.Streams.DuplicateWindow, c.Streams.CommandMaxAge = d(10*time.Second), d(5*time.Second)
		}, []string{"streams.commandMaxAge 5s: must be 0 (forever) or at least streams.duplicateWindow (10s)"}},
		{"negative command max age", func(c *settings.Config) { c.Streams.CommandMaxAge = d(-time.Hour) }, []string{"streams.commandMaxAge -1h0m0s: must not be negative"}},
		{"synthetic max age a day", func(c *settings.Config) { c.Streams.SyntheticMaxAge = d(24 * time.Hour) }, nil},
		{"synthetic max age under window", func(c *settings.Config) { c.Streams.SyntheticMaxAge = d(20 * time.Second) }, []string{"streams.syntheticMaxAge 20s: must be 0 (forever) or at least streams.duplicateWindow (30s)"}},
		{"event max age", func(c *settings.Config) { c.Streams.EventMaxAge = d(720 * time.Hour) }, []string{"streams.eventMaxAge 720h0m0s: must be 0: events are kept forever"}},
		{"negative event max age", func(c *settings.Config) { c.Streams.EventMaxAge = d(-time.Second) }, []string{"streams.eventMaxAge -1s: must be 0"}},

		{"embedded replicas 3", func(c *settings.Config) { c.NATS.Replicas = 3 }, []string{"nats.replicas 3: the embedded server"}},
		{"external replicas 3", func(c *settings.Config) { external(c); c.NATS.Replicas = 3 }, nil},
		{"replicas out of range once", func(c *settings.Config) { c.NATS.Replicas = 7 }, []string{"nats.replicas 7: must be 1 to 5"}},

		{"embedded creds", func(c *settings.Config) { c.NATS.Creds = "agentbus.creds" }, []string{"nats.creds is set but nats.url is empty"}},
		{"embedded nkey", func(c *settings.Config) { c.NATS.NKey = "agentbus.nk" }, []string{"nats.nkey is set but nats.url is empty"}},
		{"embedded tls ca", func(c *settings.Config) { c.NATS.TLS.CA = "ca.pem" }, []string{"nats.tls.ca is set but nats.url is empty"}},
		{"embedded tls pair", func(c *settings.Config) { c.NATS.TLS.Cert, c.NATS.TLS.Key = "c.pem", "k.pem" }, []string{"nats.tls.cert is set but nats.url is empty", "nats.tls.key is set but nats.url is empty"}},
		{"external creds, nkey, ca", func(c *settings.Config) {
			external(c)
			c.NATS.Creds, c.NATS.NKey, c.NATS.TLS.CA = "agentbus.creds", "agentbus.nk", "ca.pem"
		}, nil},
		{"external tls pair", func(c *settings.Config) { external(c); c.NATS.TLS.Cert, c.NATS.TLS.Key = "c.pem", "k.pem" }, nil},
		{"tls cert without key", func(c *settings.Config) { external(c); c.NATS.TLS.Cert = "c.pem" }, []string{"nats.tls.cert is set without nats.tls.key"}},
		{"tls key without cert", func(c *settings.Config) { external(c); c.NATS.TLS.Key = "k.pem" }, []string{"nats.tls.key is set without nats.tls.cert"}},

		{"public url with a path", func(c *settings.Config) { c.PublicURL = "https://bus.example.com/api/" }, nil},
		{"public url without a host", func(c *settings.Config) { c.PublicURL = "http://" }, []string{`publicUrl "http://"`}},
		{"public url with a space", func(c *settings.Config) { c.PublicURL = "http://exa mple/ x" }, []string{"publicUrl"}},
		{"public url with a query and fragment", func(c *settings.Config) { c.PublicURL = "https://h/p?q=1#frag" }, []string{"publicUrl"}},
		{"public url with a user", func(c *settings.Config) { c.PublicURL = "https://u:p@h/" }, []string{"publicUrl"}},
		{"public url not http", func(c *settings.Config) { c.PublicURL = "ftp://h/" }, []string{"publicUrl"}},
		{"catalog reload every 30s", func(c *settings.Config) { c.Catalog.Reload = d(30 * time.Second) }, nil},
		{"catalog reload too often", func(c *settings.Config) { c.Catalog.Reload = d(100 * time.Millisecond) }, []string{"catalog.reload 100ms: must be 0"}},
		{"negative catalog reload", func(c *settings.Config) { c.Catalog.Reload = d(-time.Second) }, []string{"catalog.reload -1s"}},
		{"zero shutdown timeout", func(c *settings.Config) { c.ShutdownTimeout = 0 }, []string{"shutdownTimeout 0s: must be positive"}},
		{"negative shutdown timeout", func(c *settings.Config) { c.ShutdownTimeout = d(-5 * time.Second) }, []string{"shutdownTimeout -5s"}},
		{"rate off", func(c *settings.Config) { c.Limits.Rate.PerSecond = 0 }, nil},
		{"a request a day", func(c *settings.Config) { c.Limits.Rate.PerSecond = settings.MinRatePerSecond }, nil},
		{"a rate too small to refill", func(c *settings.Config) { c.Limits.Rate.PerSecond = 1e-12 }, []string{"limits.rate"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := settings.Default()
			c.mutate(&cfg)
			wantProblems(t, cfg.Validate(), c.bad)
		})
	}
}

// TestListenNotHostPort: an address that does not parse is reported once,
// without the loopback check that needs a host.
func TestListenNotHostPort(t *testing.T) {
	t.Parallel()
	for name, mutate := range map[string]func(*settings.Config){
		`listen "8080"`:      func(c *settings.Config) { c.Listen = "8080" },
		`nats.listen "4222"`: func(c *settings.Config) { l := "4222"; c.NATS.Listen = &l },
	} {
		cfg := settings.Default()
		mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), name+": must be host:port") {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if strings.Contains(err.Error(), "loopback") || strings.Contains(err.Error(), ";") {
			t.Errorf("%s: more than one problem: %v", name, err)
		}
	}
}

// TestConfigKeysAreCaseSensitive: a key that names a setting only in
// another case is refused, naming the right one; the documented names load.
func TestConfigKeysAreCaseSensitive(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		"Listen: 127.0.0.1:9000\n":                       `key "Listen": did you mean "listen"?`,
		"nats:\n  Prefix: bus\n":                         `key "nats.Prefix": did you mean "prefix"?`,
		"nats:\n  tls:\n    CA: ca.pem\n":                `key "nats.tls.CA": did you mean "ca"?`,
		"listen: 127.0.0.1:9000\nnats:\n  prefix: bus\n": "",
	} {
		_, _, err := loadFile(t, body)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", body, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

// TestConfigFileProblems: a config file's mistakes are named by their key
// in the file's terms, without the decoder's words (Go types, "JSON" for a
// YAML file).
func TestConfigFileProblems(t *testing.T) {
	t.Parallel()
	expectFileProblems(t, map[string]string{
		"limits:\n  bodyBytes: lots\n":    "limits.bodyBytes must be an integer, not a string; it must be at least 1024",
		"processor:\n  workers: [1]\n":    "processor.workers must be an integer, not an array; it must be 1 to 1024",
		"processor:\n  disabled: maybe\n": "processor.disabled must be true or false, not a string",
		"tenancy:\n  tenants: acme\n":     "tenancy.tenants must be an array, not a string",
		"bogus: 1\n":                      `key "bogus" is not a setting`,
		"limits:\n  bogus: 1\n":           `key "limits.bogus" is not a setting`,
		"shutdownTimeout: soon\n":         `shutdownTimeout: invalid duration "soon" (use e.g. 30s, 5m, 168h)`,
		"listen: [\n":                     "yaml: line 1:",
		`{"limits": {"bodyBytes": "x"}}`:  "limits.bodyBytes must be an integer",
		"limits:\n  bodyBytes: 1048576\n": "",
	})
}

// expectFileProblems loads each config file body and checks that it is
// refused with the problem named ("config file <path>: <want>"), or
// accepted when want is "", and that no refusal speaks of the decoder.
func expectFileProblems(t *testing.T, cases map[string]string) {
	t.Helper()
	for body, want := range cases {
		_, path, err := loadFile(t, body)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", body, err)
		case want == "":
		case err == nil || !strings.Contains(err.Error(), "config file "+path+": "+want):
			t.Errorf("%q: %v, want %q", body, err, want)
		case strings.Contains(err.Error(), "JSON") || strings.Contains(err.Error(), "Go struct") || strings.Contains(err.Error(), "int64"):
			t.Errorf("%q: %v speaks of the decoder", body, err)
		}
	}
}

// TestValidateSubscriptions: the subscription settings are refused out of
// range, and a bad secret key is refused without being quoted.
func TestValidateSubscriptions(t *testing.T) {
	t.Parallel()
	const key = "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=" // 32 bytes
	const badKey = "c2hvcnQta2V5LW9mLTIwLWJ5dGU="              // 20 bytes
	cases := []struct {
		name   string
		mutate func(*settings.Subscriptions)
		bad    string // "" = valid
	}{
		{"defaults", func(*settings.Subscriptions) {}, ""},
		{"a key", func(s *settings.Subscriptions) { s.SecretKey = key }, ""},
		{"a key without padding", func(s *settings.Subscriptions) { s.SecretKey = settings.Secret(strings.TrimRight(key, "=")) }, ""},
		{"a short key", func(s *settings.Subscriptions) { s.SecretKey = badKey }, "subscriptions.secretKey (AGENTBUS_WEBHOOK_SECRET_KEY): the key is 20 bytes"},
		{"a key that is not base64", func(s *settings.Subscriptions) { s.SecretKey = "not base64 at all, not at all!" }, "subscriptions.secretKey (AGENTBUS_WEBHOOK_SECRET_KEY): the key is not base64"},
		{"overlap a minute", func(s *settings.Subscriptions) { s.RotationOverlap = settings.Duration(time.Minute) }, ""},
		{"overlap 30 days", func(s *settings.Subscriptions) { s.RotationOverlap = settings.Duration(720 * time.Hour) }, ""},
		{"no overlap", func(s *settings.Subscriptions) { s.RotationOverlap = 0 }, "subscriptions.rotationOverlap 0s: must be 1m to 720h"},
		{"overlap too long", func(s *settings.Subscriptions) { s.RotationOverlap = settings.Duration(721 * time.Hour) }, "subscriptions.rotationOverlap"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := settings.Default()
			tt.mutate(&c.Subscriptions)
			err := c.Validate()
			switch {
			case tt.bad == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)):
				t.Fatalf("error %v, want one saying %q", err, tt.bad)
			case err != nil && c.Subscriptions.SecretKey != "" && strings.Contains(err.Error(), string(c.Subscriptions.SecretKey)):
				t.Fatalf("the error quotes the key: %v", err)
			}
		})
	}
}

// TestExampleFileLoads: config/agentbus.example.yaml, which lists every
// setting, is a valid configuration as it stands.
func TestExampleFileLoads(t *testing.T) {
	t.Parallel()
	c := settings.Default()
	if err := c.LoadFile(filepath.Join("..", "..", "config", "agentbus.example.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Subscriptions != settings.DefaultSubscriptions {
		t.Fatalf("the example's subscriptions block %+v is not the defaults %+v", c.Subscriptions, settings.DefaultSubscriptions)
	}
}

// wantProblems fails t unless err reports exactly the problems bad (each
// a substring of one; none: err is nil).
func wantProblems(t *testing.T, err error, bad []string) {
	t.Helper()
	if len(bad) == 0 {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("accepted, want %q", bad)
	}
	for _, want := range bad {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "; ") + 1; n != len(bad) {
		t.Errorf("want %d problem(s), got %d: %v", len(bad), n, err)
	}
}

// loadFile writes body to a config file of t's own and loads it over the
// defaults; it returns the configuration, the file's path and LoadFile's
// error.
func loadFile(t *testing.T, body string) (settings.Config, string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agentbus.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := settings.Default()
	err := cfg.LoadFile(path)
	return cfg, path, err
}

// TestReceiptTTLStillLoads: a file written for an earlier version that
// sets streams.receiptTTL (no longer used) still loads and validates,
// whatever the value, and the default leaves it unset (0), which is how
// agentbus tells a file that sets it, to warn.
func TestReceiptTTLStillLoads(t *testing.T) {
	t.Parallel()
	if d := settings.Default().Streams.ReceiptTTL; d != 0 {
		t.Errorf("default streams.receiptTTL %v, want unset", d)
	}
	for _, v := range []string{"24h", "2m", "1s"} {
		cfg, _, err := loadFile(t, "streams:\n  receiptTTL: "+v+"\n")
		if err != nil {
			t.Fatalf("receiptTTL %s: %v", v, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("receiptTTL %s: %v", v, err)
		}
		if cfg.Streams.ReceiptTTL == 0 {
			t.Errorf("receiptTTL %s: read as unset", v)
		}
	}
}
