package settings

import "github.com/agentbus/agentbus/pkg/decide"

// Quotas bound what one tenant may keep registered and what one
// registration may list, and plan the command stream's consumers from
// that. A registration past a quota is refused with 403 QUOTA_EXCEEDED.
type Quotas struct {
	// Agents is how many agents one tenant may have registered at once
	// (default 100, 1 to 100,000). Each agent accepting something has a
	// durable consumer on the command stream.
	Agents int `json:"agents"`
	// Services is how many services one tenant may have registered at
	// once (default 100, 1 to 100,000).
	Services int `json:"services"`
	// Subscriptions is how many webhook subscriptions one tenant may hold
	// (default 100, 1 to 100,000); past it CreateSubscription is rejected
	// with QUOTA_EXCEEDED.
	Subscriptions int `json:"subscriptions"`
	// RegistrationTypes bounds the accepts, and the produces, of one agent
	// or service registration: the maxItems of the RegisterAgent and
	// RegisterService schemas (default 64, 8 to 1024). Each accepted type
	// becomes a filter of the agent's consumer, and NATS checks a
	// consumer's filters pairwise.
	RegistrationTypes int `json:"registrationTypes"`
	// CommandConsumers is the command stream's max_consumers: how many
	// durable consumers NATS lets it have, agents' and others'. 0 (the
	// default) plans it as PlannedCommandConsumers says; otherwise at
	// least ReservedConsumers + 1. Agents of all tenants together are
	// refused past CommandConsumers - ReservedConsumers.
	CommandConsumers int `json:"commandConsumers"`
}

// DefaultQuotas are the default quotas.
var DefaultQuotas = Quotas{Agents: 100, Services: 100, Subscriptions: 100, RegistrationTypes: 64}

// ReservedConsumers are the command stream's consumers that are not
// agents': agentbus's own (processor, receipts) and external processors'.
const ReservedConsumers = 64

// openTenantsPlanned is how many tenants the command stream is planned for
// at least when any valid tenant id may be used (tenancy.open).
const openTenantsPlanned = 10

// maxRegistrationTypes is the most quotas.registrationTypes may be: as
// many types as agentbus makes into the filters of one consumer.
const maxRegistrationTypes = decide.MaxConsumerFilters

// PlannedCommandConsumers returns the command stream's max_consumers:
// quotas.commandConsumers when set, else quotas.agents for each tenant
// plus ReservedConsumers. The tenants are the listed ones (tenancy.tenants;
// one in single-tenant mode) and, with tenancy.open, at least 10: past
// those, agents of all tenants together are refused before NATS would
// refuse their consumers.
func (c *Config) PlannedCommandConsumers() int {
	if c.Quotas.CommandConsumers > 0 {
		return c.Quotas.CommandConsumers
	}
	tenants := 1
	if c.Tenancy.Mode == "multi" {
		tenants = len(c.Tenancy.Tenants)
		if c.Tenancy.Open {
			tenants = max(tenants, openTenantsPlanned)
		}
		tenants = max(tenants, 1)
	}
	return c.Quotas.Agents*tenants + ReservedConsumers
}

func (c *Config) validateQuotas(bad func(string, ...any)) {
	q := c.Quotas
	for _, n := range []struct {
		key string
		n   int
	}{{"agents", q.Agents}, {"services", q.Services}, {"subscriptions", q.Subscriptions}} {
		if n.n < 1 || n.n > 100_000 {
			bad("quotas.%s %d: must be 1 to 100000", n.key, n.n)
		}
	}
	if n := q.RegistrationTypes; n < 8 || n > maxRegistrationTypes {
		bad("quotas.registrationTypes %d: must be 8 to %d", n, maxRegistrationTypes)
	}
	if n := q.CommandConsumers; n != 0 && (n <= ReservedConsumers || n > 10_000_000) {
		bad("quotas.commandConsumers %d: must be 0 (planned from the quotas) or %d to 10000000: %d are kept for agentbus's own consumers and external processors", n, ReservedConsumers+1, ReservedConsumers)
	}
}
