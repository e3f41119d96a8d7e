package config

// Quotas bound what one tenant may keep registered and what one
// registration may list.
type Quotas struct {
	// RegistrationTypes bounds the accepts, and the produces, of one agent
	// or service registration: the maxItems of the RegisterAgent and
	// RegisterService schemas (default 64, 8 to 1024). Each accepted type
	// becomes a filter of the agent's consumer, and NATS checks a
	// consumer's filters pairwise.
	RegistrationTypes int `json:"registrationTypes"`
}

// DefaultQuotas are the default quotas.
var DefaultQuotas = Quotas{RegistrationTypes: 64}

// maxRegistrationTypes is the most quotas.registrationTypes may be: as
// many types as agentbus makes into the filters of one consumer
// (decide.MaxConsumerFilters).
const maxRegistrationTypes = 1024

func (c *Config) validateQuotas(bad func(string, ...any)) {
	if n := c.Quotas.RegistrationTypes; n < 8 || n > maxRegistrationTypes {
		bad("quotas.registrationTypes %d: must be 8 to %d", n, maxRegistrationTypes)
	}
}
