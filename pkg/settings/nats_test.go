package settings_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/streams"
	"github.com/nats-io/nkeys"
)

// TestValidateEmbeddedUsers: every NATS user of the embedded server is
// checked up front, naming the user and the key: one credential each, no
// reserved name or consumer, tenants that exist in the tenancy mode,
// rights that are publish or read.
func TestValidateEmbeddedUsers(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	const pw = settings.Secret("a-password-of-16+")
	multi := func(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"a", "b"} }
	user := func(u settings.NATSUser) func(*settings.Config) {
		return func(c *settings.Config) { c.NATS.Embedded.Users = append(c.NATS.Embedded.Users, u) }
	}
	cases := []struct {
		name   string
		mutate []func(*settings.Config)
		bad    []string
	}{
		{"password user, defaults", []func(*settings.Config){user(settings.NATSUser{User: "svc", Password: pw})}, nil},
		{"nkey user of two tenants", []func(*settings.Config){multi, user(settings.NATSUser{User: "svc", NKey: pub, Tenants: []string{"a", "b"},
			Commands: []string{"read"}, Events: []string{"publish", "read"}, Consumers: []string{"svc", "agent_a_bot"}})}, nil},
		{"every tenant", []func(*settings.Config){multi, user(settings.NATSUser{User: "svc", PasswordFile: "/run/secrets/svc", Tenants: []string{"*"}, Consumers: []string{"agent_b_bot"}})}, nil},
		{"bcrypt hash", []func(*settings.Config){user(settings.NATSUser{User: "svc", Password: "$2a$11$abcdefghijklmnopqrstuu"})}, nil},
		{"open tenants", []func(*settings.Config){multi, func(c *settings.Config) { c.Tenancy.Open = true },
			user(settings.NATSUser{User: "svc", Password: pw, Tenants: []string{"zed"}})}, nil},

		{"external server", []func(*settings.Config){func(c *settings.Config) { c.NATS.URL = "nats://n1:4222" }, user(settings.NATSUser{User: "svc", Password: pw})},
			[]string{"nats.embedded.users is set but nats.url is not empty"}},
		{"no user name", []func(*settings.Config){user(settings.NATSUser{Password: pw})}, []string{"nats.embedded.users[0]: user is required"}},
		{"user name with a dot", []func(*settings.Config){user(settings.NATSUser{User: "svc.a", Password: pw})}, []string{`users "svc.a": user must match`}},
		{"agentbus's own name", []func(*settings.Config){user(settings.NATSUser{User: "agentbus-admin", Password: pw})}, []string{`users "agentbus-admin": the user name is agentbus's own`}},
		{"twice", []func(*settings.Config){user(settings.NATSUser{User: "svc", Password: pw}), user(settings.NATSUser{User: "svc", Password: pw})},
			[]string{`users "svc": configured twice`}},
		{"no credential", []func(*settings.Config){user(settings.NATSUser{User: "svc"})}, []string{"needs exactly one of password, passwordFile and nkey"}},
		{"two credentials", []func(*settings.Config){user(settings.NATSUser{User: "svc", Password: pw, NKey: pub})}, []string{"needs exactly one"}},
		{"short password", []func(*settings.Config){user(settings.NATSUser{User: "svc", Password: "short"})}, []string{"password must be at least 16 characters"}},
		{"a seed for an nkey", []func(*settings.Config){user(settings.NATSUser{User: "svc", NKey: string(seed)})}, []string{"nkey must be a user's public NKey"}},
		{"one nkey, two users", []func(*settings.Config){user(settings.NATSUser{User: "x", NKey: pub}), user(settings.NATSUser{User: "y", NKey: pub})},
			[]string{`users "y": nkey is "x"'s already`}},
		{"another tenant in single mode", []func(*settings.Config){user(settings.NATSUser{User: "svc", Password: pw, Tenants: []string{"acme"}})},
			[]string{`tenants: "acme": in single-tenant mode the one tenant is "default"`}},
		{"no tenants in multi mode", []func(*settings.Config){multi, user(settings.NATSUser{User: "svc", Password: pw})}, []string{"tenants is required in multi-tenant mode"}},
		{"unknown tenant", []func(*settings.Config){multi, user(settings.NATSUser{User: "svc", Password: pw, Tenants: []string{"c"}})}, []string{`tenants: "c" is not in tenancy.tenants`}},
		{"bad tenant", []func(*settings.Config){multi, user(settings.NATSUser{User: "svc", Password: pw, Tenants: []string{"A>"}})}, []string{`tenants: "A>" must be`}},
		{"every tenant and one", []func(*settings.Config){multi, user(settings.NATSUser{User: "svc", Password: pw, Tenants: []string{"*", "a"}})}, []string{`"*" (every tenant) goes alone`}},
		{"unknown right", []func(*settings.Config){user(settings.NATSUser{User: "svc", Password: pw, Events: []string{"delete"}})}, []string{`events "delete": must be publish or read`}},
		{"no rights", []func(*settings.Config){user(settings.NATSUser{User: "svc", Password: pw, Commands: []string{}, Events: []string{}})}, []string{"grants nothing"}},
		{"consumers without read", []func(*settings.Config){user(settings.NATSUser{User: "svc", Password: pw, Events: []string{}, Consumers: []string{"svc"}})},
			[]string{"consumers need read on commands or events"}},
		{"agentbus's consumer", []func(*settings.Config){user(settings.NATSUser{User: "svc", Password: pw, Consumers: []string{"receipts"}})}, []string{`consumer "receipts" is agentbus's own`}},
		{"consumer name with a wildcard", []func(*settings.Config){user(settings.NATSUser{User: "svc", Password: pw, Consumers: []string{"svc.*"}})}, []string{`consumer "svc.*" must match`}},
		{"another tenant's agent", []func(*settings.Config){multi, user(settings.NATSUser{User: "svc", Password: pw, Tenants: []string{"a"}, Consumers: []string{"agent_b_bot"}})},
			[]string{`consumer "agent_b_bot" is an agent's of tenant "b"`}},
		{"one consumer, two users", []func(*settings.Config){user(settings.NATSUser{User: "x", Password: pw, Consumers: []string{"c"}}), user(settings.NATSUser{User: "y", Password: pw, Consumers: []string{"c"}})},
			[]string{`users "y": consumer "c" is "x"'s already`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := settings.Default()
			for _, m := range c.mutate {
				m(&cfg)
			}
			wantProblems(t, cfg.Validate(), c.bad)
		})
	}
}

// TestEmbeddedRequiresAuth: the embedded client port requires credentials
// with HTTP authentication on or a NATS user configured, and a
// non-loopback nats.listen is then refused for want of TLS, not of
// authentication.
func TestEmbeddedRequiresAuth(t *testing.T) {
	t.Parallel()
	cfg := settings.Default()
	if cfg.EmbeddedRequiresAuth() {
		t.Error("the default (auth none, no users) requires credentials")
	}
	cfg.Auth.Type = "bearer"
	if !cfg.EmbeddedRequiresAuth() {
		t.Error("auth bearer: no credentials required")
	}
	wide := "0.0.0.0:4222"
	cfg.NATS.Listen = &wide
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "no TLS") {
		t.Errorf("auth bearer, nats.listen %s: %v, want refused for want of TLS", wide, err)
	}
	cfg = settings.Default()
	cfg.NATS.Embedded.Users = []settings.NATSUser{{User: "svc", Password: "a-password-of-16+"}}
	if !cfg.EmbeddedRequiresAuth() {
		t.Error("a NATS user: no credentials required")
	}
}

// TestNATSUserFromFile: the users section loads from YAML with the
// documented keys, its defaults apply, and a password is masked when the
// configuration is marshalled.
func TestNATSUserFromFile(t *testing.T) {
	t.Parallel()
	body := `auth:
  type: bearer
nats:
  embedded:
    users:
      - user: shipping
        password: shipping-password-0123
        consumers: [shipping]
      - user: billing
        nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4
        commands: [read]
        events: [publish, read]
`
	cfg, _, err := loadFile(t, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	users := cfg.NATS.Embedded.Users
	if len(users) != 2 {
		t.Fatalf("users %+v", users)
	}
	s, b := users[0], users[1]
	if s.CommandRights() != (settings.Rights{Publish: true}) || s.EventRights() != (settings.Rights{Read: true}) ||
		!slices.Equal(s.TenantList(), []string{"default"}) {
		t.Errorf("shipping's defaults: commands %+v, events %+v, tenants %v", s.CommandRights(), s.EventRights(), s.TenantList())
	}
	if b.CommandRights() != (settings.Rights{Read: true}) || b.EventRights() != (settings.Rights{Publish: true, Read: true}) {
		t.Errorf("billing: commands %+v, events %+v", b.CommandRights(), b.EventRights())
	}
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "shipping-password-0123") || !strings.Contains(string(out), `"password":"***"`) {
		t.Errorf("marshalled configuration shows the password: %s", out)
	}
}

// TestReservedConsumersAreAgentbus: the consumer names no NATS user may
// have are exactly those of agentbus's declarative files and that of the
// receipts consumers of earlier versions (bus.ReceiptsConsumer, which
// agentbus removes at start and which streams/ no longer declares), and
// an agent's consumer name reads as agent_<tenant>_<id>.
func TestReservedConsumersAreAgentbus(t *testing.T) {
	t.Parallel()
	specs, err := natsjs.LoadSpecs(streams.Files, natsjs.Settings{Prefix: "agentbus", DuplicateWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sp := range specs {
		if sp.Kind == "consumer" && !slices.Contains(names, sp.Name) {
			names = append(names, sp.Name)
		}
	}
	if slices.Contains(names, bus.ReceiptsConsumer) {
		t.Errorf("streams/ declares a %s consumer", bus.ReceiptsConsumer)
	}
	names = append(names, bus.ReceiptsConsumer)
	slices.Sort(names)
	reserved := slices.Sorted(slices.Values(settings.AgentbusConsumers))
	if !slices.Equal(names, reserved) {
		t.Errorf("consumers in streams/ and the former %s: %v, reserved %v", bus.ReceiptsConsumer, names, reserved)
	}
	if got := bus.AgentConsumer("acme", "bot"); got != "agent_acme_bot" {
		t.Errorf("agent consumer name %q, want agent_<tenant>_<id>", got)
	}
	if !slices.Equal(settings.ReservedNATSUsers, natsjs.ReservedUsers) {
		t.Errorf("reserved NATS users: config %v, natsjs %v", settings.ReservedNATSUsers, natsjs.ReservedUsers)
	}
}

// TestReadmeNATSUserExample: the users example of docs/embedded-nats.md
// loads and validates (in multi-tenant mode with its tenant).
func TestReadmeNATSUserExample(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/embedded-nats.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "# Internal services on the embedded NATS")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/embedded-nats.md: no yaml block")
	}
	cfg, _, err := loadFile(t, "tenancy:\n  mode: multi\n  tenants: [acme]\n"+block)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := len(cfg.NATS.Embedded.Users); n != 1 {
		t.Fatalf("%d users in the example", n)
	}
}
