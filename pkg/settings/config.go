// Package settings is agentbus's one typed configuration: defaults, then the
// config file (YAML), then AGENTBUS_* environment variables, then flags.
// It is parsed once in main and handed down as sub-structs.
package settings

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/settings/strict"
)

// Duration is a time.Duration written as "30s", "2h" in files.
type Duration time.Duration

// UnmarshalJSON parses "30s" style durations.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q (use e.g. 30s, 5m, 168h)", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Config is every setting of `agentbus serve`.
type Config struct {
	// Listen is the HTTP address (default 127.0.0.1:8080).
	Listen string `json:"listen"`
	// PublicURL is rest.endpoint: the outermost address callers use
	// (default http://<listen>).
	PublicURL string `json:"publicUrl"`
	// Data is the data directory (default ./data): the embedded server's
	// store, and the replica's read models on disk (<data>/index), with an
	// external NATS too.
	Data string `json:"data"`

	NATS      NATS      `json:"nats"`
	Streams   Streams   `json:"streams"`
	Catalog   Catalog   `json:"catalog"`
	Limits    Limits    `json:"limits"`
	Processor Processor `json:"processor"`
	Tenancy   Tenancy   `json:"tenancy"`
	Registry  Registry  `json:"registry"`
	Quotas    Quotas    `json:"quotas"`
	Reads     Reads     `json:"reads"`
	Push      Push      `json:"push"`
	Auth      Auth      `json:"auth"`
	Events    Events    `json:"events"`
	Webhooks  Webhooks  `json:"webhooks"`
	Log       Log       `json:"log"`
	HTTP      HTTP      `json:"http"`
	Memory    Memory    `json:"memory"`
	Ops       Ops       `json:"ops"`
	Console   Console   `json:"console"`

	AuthLimits AuthLimits `json:"authLimits"`
	// Subscriptions tunes webhook subscriptions (subscriptions.go).
	Subscriptions Subscriptions `json:"subscriptions"`
	// ShutdownTimeout bounds a graceful stop (default 15s).
	ShutdownTimeout Duration `json:"shutdownTimeout"`
}

// NATS says which server to use.
type NATS struct {
	// URL of an external server; empty runs the embedded one.
	URL   string `json:"url"`
	Creds string `json:"creds"`
	NKey  string `json:"nkey"`
	TLS   struct {
		CA   string `json:"ca"`
		Cert string `json:"cert"`
		Key  string `json:"key"`
	} `json:"tls"`
	// Listen is where the embedded server accepts NATS clients (internal
	// services); "" keeps it in-process (default 127.0.0.1:4222).
	Listen *string `json:"listen"`
	// Embedded holds the embedded server's users.
	Embedded Embedded `json:"embedded"`
	// Prefix of every subject (default "agentbus").
	Prefix string `json:"prefix"`
	// Replicas of every stream: 1 embedded, 3 in a cluster (default 1).
	Replicas int `json:"replicas"`
	// Storage of streams: file or memory (default file).
	Storage string `json:"storage"`
	// Sync "always" fsyncs every write of the embedded server.
	Sync string `json:"sync"`
}

// Streams are retention settings. A max age is 0 (forever) or at least
// the duplicate window.
type Streams struct {
	CommandMaxAge   Duration `json:"commandMaxAge"`   // 0 = forever
	SyntheticMaxAge Duration `json:"syntheticMaxAge"` // injected events (POST /events); 0 = forever
	EventMaxAge     Duration `json:"eventMaxAge"`     // events are kept forever; anything but 0 is refused with the reason
	DuplicateWindow Duration `json:"duplicateWindow"` // default 30s
	// ReceiptTTL is not used: it was how long the receipts bucket of
	// earlier versions kept a command's receipt in the NATS server's
	// memory; each replica's history on disk is the correlation index
	// now. A file that sets it still loads, and agentbus warns.
	ReceiptTTL Duration `json:"receiptTTL"`
}

// Catalog lists the catalogue directories loaded after the built-in one.
type Catalog struct {
	// Dirs; empty uses the example catalogue embedded in the binary.
	Dirs []string `json:"dirs"`
	// Reload, when set, is how often agentbus serve looks for a change of
	// the files under Dirs and reloads the catalogue when one changed;
	// 0 (the default) reloads on SIGHUP only.
	Reload Duration `json:"reload"`
}

// Limits bound requests.
type Limits struct {
	BodyBytes   int64 `json:"bodyBytes"`   // default 1 MiB
	PageDefault int   `json:"pageDefault"` // default 100
	PageMax     int   `json:"pageMax"`     // default 1000
	// Rate limits requests per credential (see auth.go).
	Rate Rate `json:"rate"`
}

// Processor tunes the built-in processor.
type Processor struct {
	// Disabled stops this replica from processing commands.
	Disabled bool `json:"disabled"`
	// Workers handle commands in parallel (default 32).
	Workers int `json:"workers"`
	// Handoff passes the commands this replica queues to its own
	// processor in memory (process.Handoff; default true). Off, they are
	// decided as a command another replica queued is: the same outcome,
	// at more CPU per command.
	Handoff bool `json:"handoff"`
}

// Tenancy selects single- or multi-tenant mode.
type Tenancy struct {
	Mode    string   `json:"mode"`    // single (default) | multi
	Tenants []string `json:"tenants"` // known tenants in multi mode
	// Open lets any valid tenant id be used without being listed.
	Open bool `json:"open"`
}

// Log selects the log format.
type Log struct {
	Level  string `json:"level"`  // debug | info (default) | warn | error
	Format string `json:"format"` // text (default) | json
}

// Console is the web console, served at /console/ (in multi-tenant mode,
// /{tenantId}/console/): static files that reach agentbus through the REST
// API with the caller's own credential.
type Console struct {
	// Enabled serves the console (default true) [--no-console,
	// AGENTBUS_CONSOLE].
	Enabled bool `json:"enabled"`
}

// Default returns the built-in defaults.
func Default() Config {
	listen := "127.0.0.1:4222"
	return Config{
		Listen: "127.0.0.1:8080",
		Data:   "data",
		NATS:   NATS{Listen: &listen, Prefix: "agentbus", Replicas: 1, Storage: "file"},
		Streams: Streams{
			DuplicateWindow: Duration(30 * time.Second),
		},
		Limits:          Limits{BodyBytes: 1 << 20, PageDefault: 100, PageMax: 1000, Rate: DefaultRate},
		Auth:            DefaultAuth,
		AuthLimits:      DefaultAuthLimits,
		Processor:       Processor{Workers: 32, Handoff: true},
		Registry:        DefaultRegistry,
		Webhooks:        DefaultWebhooks.clone(),
		Quotas:          DefaultQuotas,
		Subscriptions:   DefaultSubscriptions,
		Reads:           DefaultReads,
		Push:            DefaultPush,
		Tenancy:         Tenancy{Mode: "single"},
		Log:             Log{Level: "info", Format: "text"},
		HTTP:            DefaultHTTP,
		Memory:          DefaultMemory,
		Ops:             DefaultOps,
		Console:         Console{Enabled: true},
		ShutdownTimeout: Duration(15 * time.Second),
	}
}

// LoadFile merges a YAML (or JSON) file over c. Unknown keys, keys in
// another case than the documented one, and values of the wrong type are
// errors naming the key (strict.Decode), a number out of range with the
// range Validate takes.
func (c *Config) LoadFile(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	if err := strict.Decode(raw, c, allowedNumbers); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// validPublicURL reports whether s can be the base every absolute URL
// agentbus writes (Location headers, schema URLs) is built on.
func validPublicURL(s string) bool {
	u, ok := envelope.HTTPURL(s)
	return ok && u.User == nil && u.RawQuery == "" && !u.ForceQuery && !strings.Contains(s, "#")
}

// Validate checks every setting and returns all problems at once.
func (c *Config) Validate() error {
	if problems := c.Problems(); len(problems) > 0 {
		return errors.New("invalid configuration: " + strings.Join(problems, "; "))
	}
	return nil
}

// Problems checks every setting and returns what is wrong, one problem
// each, naming its key; none for a valid configuration.
func (c *Config) Problems() []string {
	var problems []string
	bad := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	if !hostPort(c.Listen) {
		bad("listen %q: must be host:port", c.Listen)
	}
	if c.PublicURL != "" && !validPublicURL(c.PublicURL) {
		bad("publicUrl %q: must be an absolute http(s) URL with a host, optionally a path, and no query, fragment, user or spaces", c.PublicURL)
	}
	if c.ShutdownTimeout.D() <= 0 {
		bad("shutdownTimeout %s: must be positive", c.ShutdownTimeout.D())
	}
	if !prefixRE.MatchString(c.NATS.Prefix) {
		bad("nats.prefix %q: must match [a-z][a-z0-9-]{0,31}", c.NATS.Prefix)
	}
	if c.NATS.Replicas < 1 || c.NATS.Replicas > 5 {
		bad("nats.replicas %d: must be 1 to 5", c.NATS.Replicas)
	} else if c.NATS.URL == "" && c.NATS.Replicas > 1 {
		bad("nats.replicas %d: the embedded server (nats.url empty) is a single node and needs 1, or set nats.url (--nats-url) to use a cluster", c.NATS.Replicas)
	}
	c.validateNATSAuth(bad)
	c.validateEmbedded(bad)
	if c.NATS.Storage != "file" && c.NATS.Storage != "memory" {
		bad("nats.storage %q: must be file or memory", c.NATS.Storage)
	}
	if c.NATS.Sync != "" && c.NATS.Sync != "default" && c.NATS.Sync != "always" {
		bad("nats.sync %q: must be default or always", c.NATS.Sync)
	}
	if c.NATS.Listen != nil && *c.NATS.Listen != "" {
		if !hostPort(*c.NATS.Listen) {
			bad("nats.listen %q: must be host:port or empty", *c.NATS.Listen)
		}
	}
	if c.Limits.BodyBytes < 1024 {
		bad("limits.bodyBytes must be at least 1024")
	}
	if c.Limits.PageMax < 1 {
		bad("limits.pageMax %d: must be at least 1", c.Limits.PageMax)
	}
	if c.Limits.PageDefault < 1 || c.Limits.PageDefault > max(c.Limits.PageMax, 1) {
		bad("limits.pageDefault %d: must be 1 to limits.pageMax (%d)", c.Limits.PageDefault, c.Limits.PageMax)
	}
	if c.Processor.Workers < 1 || c.Processor.Workers > 1024 {
		bad("processor.workers must be 1 to 1024")
	}
	if c.Streams.DuplicateWindow.D() < time.Second {
		bad("streams.duplicateWindow must be at least 1s")
	}
	if r := c.Catalog.Reload.D(); r != 0 && r < time.Second {
		bad("catalog.reload %s: must be 0 (reload on SIGHUP only) or at least 1s", r)
	}
	// 0 keeps messages forever; a limited age shorter than the duplicate
	// window is refused by JetStream.
	for _, a := range []struct {
		key string
		age time.Duration
	}{{"streams.commandMaxAge", c.Streams.CommandMaxAge.D()}, {"streams.syntheticMaxAge", c.Streams.SyntheticMaxAge.D()}} {
		switch dw := c.Streams.DuplicateWindow.D(); {
		case a.age < 0:
			bad("%s %s: must not be negative (0 keeps messages forever)", a.key, a.age)
		case a.age > 0 && a.age < dw:
			bad("%s %s: must be 0 (forever) or at least streams.duplicateWindow (%s)", a.key, a.age, dw)
		}
	}
	// The event log is the record the agent and service registries are
	// replayed from: an aged-out registration would vanish from them and
	// its agent's consumer be deleted as if the agent were gone.
	if age := c.Streams.EventMaxAge.D(); age != 0 {
		bad("streams.eventMaxAge %s: must be 0: events are kept forever, since the agent and service registries are replayed from them", age)
	}
	switch c.Tenancy.Mode {
	case "single", "multi":
	default:
		bad("tenancy.mode %q: must be single or multi", c.Tenancy.Mode)
	}
	for _, t := range c.Tenancy.Tenants {
		if !envelope.ValidTenant(t) {
			bad("tenancy.tenants: %q must match [a-z0-9][a-z0-9-]{0,62}", t)
		}
	}
	c.validateAuth(bad)
	c.validateAuthLimits(bad)
	c.validateRegistry(bad)
	c.validateWebhooks(bad)
	c.validateHTTP(bad)
	c.validateMemory(bad)
	c.validateQuotas(bad)
	c.validateSubscriptions(bad)
	c.validateReads(bad)
	c.validatePush(bad)
	c.validateOps(bad)
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format %q: must be text or json", c.Log.Format)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level %q: must be debug, info, warn or error", c.Log.Level)
	}
	return problems
}

// validateNATSAuth checks the credentials and TLS files of an external
// server: they pair up, and they are not given for the embedded server,
// which would ignore them.
func (c *Config) validateNATSAuth(bad func(string, ...any)) {
	n := c.NATS
	if n.URL == "" {
		for _, f := range []struct{ key, val string }{
			{"nats.creds", n.Creds}, {"nats.nkey", n.NKey},
			{"nats.tls.ca", n.TLS.CA}, {"nats.tls.cert", n.TLS.Cert}, {"nats.tls.key", n.TLS.Key},
		} {
			if f.val != "" {
				bad("%s is set but nats.url is empty, and the embedded server would ignore it: set nats.url (--nats-url) or remove %s", f.key, f.key)
			}
		}
	}
	switch {
	case n.TLS.Cert != "" && n.TLS.Key == "":
		bad("nats.tls.cert is set without nats.tls.key: a client certificate needs its key")
	case n.TLS.Key != "" && n.TLS.Cert == "":
		bad("nats.tls.key is set without nats.tls.cert: a client key needs its certificate")
	}
}

// hostPort reports whether s parses as host:port.
func hostPort(s string) bool {
	_, _, err := net.SplitHostPort(s)
	return err == nil
}

// Endpoint returns rest.endpoint: PublicURL, or http://<listen>.
func (c *Config) Endpoint() string {
	if c.PublicURL != "" {
		return strings.TrimRight(c.PublicURL, "/")
	}
	return "http://" + c.Listen
}

// EmbeddedListen returns the embedded server's client address ("" = none).
func (c *Config) EmbeddedListen() string {
	if c.NATS.Listen == nil {
		return ""
	}
	return *c.NATS.Listen
}
