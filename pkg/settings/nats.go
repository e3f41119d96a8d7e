package settings

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/nats-io/nkeys"
)

// Embedded holds the settings of the embedded NATS server only.
type Embedded struct {
	// Users are the internal services allowed on nats.listen, each
	// limited to its tenants' subjects. With users, or with HTTP
	// authentication on, the client port requires credentials.
	Users []NATSUser `json:"users"`
}

// NATSUser is an internal service's identity on the embedded server: a
// user name with a password (or a file holding it), or an NKey.
type NATSUser struct {
	// User names the user; its client's inbox prefix must be
	// _INBOX.<user>. [A-Za-z0-9][A-Za-z0-9_-]{0,63}.
	User string `json:"user"`
	// Password (at least 16 characters, or a bcrypt hash), PasswordFile
	// (a file holding it, read at start) or NKey (the user's public NKey,
	// U…): exactly one.
	Password     Secret `json:"password"`
	PasswordFile string `json:"passwordFile"`
	NKey         string `json:"nkey"`
	// Tenants the user acts for; "*" is every tenant. Default: the one
	// tenant of single-tenant mode; required in multi-tenant mode.
	Tenants []string `json:"tenants"`
	// Commands and Events list what the user may do on each stream:
	// publish (to its tenants' subjects) and read (its consumers, the last
	// message of a subject, live subscriptions). Default: commands
	// [publish], events [read].
	Commands []string `json:"commands"`
	Events   []string `json:"events"`
	// Consumers are the durable consumers the user may create (one filter,
	// under its tenants' subjects), read, acknowledge and delete on the
	// streams it reads.
	Consumers []string `json:"consumers"`
}

// EmbeddedRequiresAuth reports whether the embedded server's client port
// requires credentials: with HTTP authentication on, or NATS users
// configured. Otherwise it takes any client (loopback only, see
// auth.allowInsecureListen).
func (c *Config) EmbeddedRequiresAuth() bool {
	return c.Auth.Type != "none" || len(c.NATS.Embedded.Users) > 0
}

// Rights are what a NATS user may do on one stream.
type Rights struct {
	Publish, Read bool
}

// CommandRights returns what u may do on the command stream.
func (u NATSUser) CommandRights() Rights { return rights(u.Commands, "publish") }

// EventRights returns what u may do on the event stream.
func (u NATSUser) EventRights() Rights { return rights(u.Events, "read") }

func rights(list []string, def string) Rights {
	if list == nil {
		list = []string{def}
	}
	return Rights{Publish: slices.Contains(list, "publish"), Read: slices.Contains(list, "read")}
}

// TenantList returns u's tenants: Tenants, or the single-tenant mode's
// one tenant when none are listed.
func (u NATSUser) TenantList() []string {
	if len(u.Tenants) == 0 {
		return []string{envelope.DefaultTenant}
	}
	return u.Tenants
}

// AgentbusConsumers are the durable consumers agentbus declares
// (streams/), and the receipts consumers of earlier versions, which it
// removes at start: no NATS user may have one of these names.
var AgentbusConsumers = []string{bus.ProcessorConsumer, bus.ReceiptsConsumer, bus.ControlConsumer, "undelivered", bus.SubscriptionsConsumer}

// ReservedNATSUsers are the user names of agentbus's own connections to
// its embedded server.
var ReservedNATSUsers = []string{"agentbus", "agentbus-admin"}

var (
	natsUserRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	consumerNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
)

// minNATSPassword is the shortest clear-text password of a NATS user: the
// client port takes guesses as fast as they come.
const minNATSPassword = 16

func bcryptHash(s string) bool {
	return strings.HasPrefix(s, "$2a$") || strings.HasPrefix(s, "$2b$") || strings.HasPrefix(s, "$2y$")
}

// validateEmbedded checks nats.embedded.users.
func (c *Config) validateEmbedded(bad func(string, ...any)) {
	users := c.NATS.Embedded.Users
	if len(users) == 0 {
		return
	}
	if c.NATS.URL != "" {
		bad("nats.embedded.users is set but nats.url is not empty: the users of an external NATS server are that server's (remove nats.embedded.users or nats.url)")
		return
	}
	names := map[string]bool{}
	nkeyOwner := map[string]string{}
	consumerOwner := map[string]string{}
	for i, u := range users {
		key := fmt.Sprintf("nats.embedded.users[%d]", i)
		if u.User != "" {
			key = fmt.Sprintf("nats.embedded.users %q", u.User)
		}
		switch {
		case u.User == "":
			bad("%s: user is required (it names the user and its inbox prefix _INBOX.<user>)", key)
		case !natsUserRE.MatchString(u.User):
			bad("%s: user must match [A-Za-z0-9][A-Za-z0-9_-]{0,63}", key)
		case slices.Contains(ReservedNATSUsers, u.User):
			bad("%s: the user name is agentbus's own, choose another", key)
		case names[u.User]:
			bad("%s: configured twice", key)
		}
		names[u.User] = true

		given := 0
		for _, v := range []string{string(u.Password), u.PasswordFile, u.NKey} {
			if v != "" {
				given++
			}
		}
		if given != 1 {
			bad("%s: needs exactly one of password, passwordFile and nkey", key)
		}
		if p := u.Password.Reveal(); p != "" && !bcryptHash(p) && len(p) < minNATSPassword {
			bad("%s: password must be at least %d characters (or a bcrypt hash)", key, minNATSPassword)
		}
		if u.NKey != "" {
			if !nkeys.IsValidPublicUserKey(u.NKey) {
				bad("%s: nkey must be a user's public NKey (U…, as nsc or nk -gen user -pubout print it), never its seed", key)
			} else if other, ok := nkeyOwner[u.NKey]; ok {
				bad("%s: nkey is %q's already", key, other)
			}
			nkeyOwner[u.NKey] = u.User
		}

		c.validateUserTenants(bad, key, u)
		for _, l := range []struct {
			name string
			list []string
		}{{"commands", u.Commands}, {"events", u.Events}} {
			for _, r := range l.list {
				if r != "publish" && r != "read" {
					bad("%s: %s %q: must be publish or read", key, l.name, r)
				}
			}
		}
		cr, er := u.CommandRights(), u.EventRights()
		if cr == (Rights{}) && er == (Rights{}) {
			bad("%s: grants nothing: give it commands or events (publish, read)", key)
		}
		if len(u.Consumers) > 0 && !cr.Read && !er.Read {
			bad("%s: consumers need read on commands or events", key)
		}
		for _, name := range u.Consumers {
			switch {
			case !consumerNameRE.MatchString(name):
				bad("%s: consumer %q must match [A-Za-z0-9_-]{1,255}", key, name)
			case slices.Contains(AgentbusConsumers, name):
				bad("%s: consumer %q is agentbus's own", key, name)
			case consumerOwner[name] != "":
				bad("%s: consumer %q is %q's already: a consumer shared by two users lets each change what the other reads", key, name, consumerOwner[name])
			default:
				if t, ok := agentTenant(name); ok && !slices.Contains(u.TenantList(), "*") && !slices.Contains(u.TenantList(), t) {
					bad("%s: consumer %q is an agent's of tenant %q, not one of the user's tenants", key, name, t)
				}
			}
			consumerOwner[name] = u.User
		}
	}
}

// validateUserTenants checks the tenants of NATS user u (key names it).
func (c *Config) validateUserTenants(bad func(string, ...any), key string, u NATSUser) {
	multi := c.Tenancy.Mode == "multi"
	if len(u.Tenants) == 0 {
		if multi {
			bad("%s: tenants is required in multi-tenant mode (tenant ids, or \"*\" for every tenant)", key)
		}
		return
	}
	for _, t := range u.Tenants {
		switch {
		case t == "*" && len(u.Tenants) > 1:
			bad("%s: tenants: \"*\" (every tenant) goes alone", key)
		case t == "*":
		case !envelope.ValidTenant(t):
			bad("%s: tenants: %q must be \"*\" or match [a-z0-9][a-z0-9-]{0,62}", key, t)
		case !multi && t != envelope.DefaultTenant:
			bad("%s: tenants: %q: in single-tenant mode the one tenant is %q", key, t, envelope.DefaultTenant)
		case multi && !c.Tenancy.Open && !slices.Contains(c.Tenancy.Tenants, t):
			bad("%s: tenants: %q is not in tenancy.tenants", key, t)
		}
	}
}

// agentTenant returns the tenant of an agent's consumer name,
// agent_<tenant>_<id> (bus.AgentConsumer).
func agentTenant(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, bus.AgentConsumerPrefix)
	if !ok {
		return "", false
	}
	t, _, ok := strings.Cut(rest, "_")
	return t, ok
}
