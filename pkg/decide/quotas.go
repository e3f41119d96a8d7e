package decide

import "github.com/agentbus/agentbus/pkg/errs"

// Quotas bound the live registrations of each tenant, and the agents of
// all tenants together, as ControlPlane decides them: a registration of a
// new id past a bound is rejected with QUOTA_EXCEEDED. The counts come
// from projections of the event log, which lag a little behind it, so
// registrations decided at the same moment may pass a bound by as many as
// are decided at once; a deletion makes room again.
type Quotas struct {
	// Agents and Services bound each tenant's; 0: no bound.
	Agents, Services int
	// AllAgents bounds the agents of all tenants together (each may have a
	// consumer on the command log, whose number NATS limits); 0: no bound.
	AllAgents int
	// Count returns how many registrations of aggType (AggAgent,
	// AggService) tenant has, or all tenants together when tenant is "".
	// Nil: no bound is checked.
	Count func(tenant, aggType string) int
}

// Exceeded returns the QUOTA_EXCEEDED error when tenant may not register
// one more aggType, or nil. It says which quota and its limit
// (details.quota, details.limit).
func (q Quotas) Exceeded(tenant, aggType string) *errs.Error {
	if q.Count == nil {
		return nil
	}
	limit, key := q.Services, "services"
	if aggType == AggAgent {
		limit, key = q.Agents, "agents"
	}
	if limit > 0 {
		if n := q.Count(tenant, aggType); n >= limit {
			return quotaError(key, limit, "tenant %q has %d %ss registered, and its quota is %d (quotas.%s): delete one to register another", tenant, n, aggType, limit, key)
		}
	}
	if aggType == AggAgent && q.AllAgents > 0 {
		if n := q.Count("", AggAgent); n >= q.AllAgents {
			return quotaError("commandConsumers", q.AllAgents, "agentbus has %d agents registered, as many as its command stream is planned for (quotas.commandConsumers)", n)
		}
	}
	return nil
}

func quotaError(key string, limit int, format string, args ...any) *errs.Error {
	e := errs.New(errs.CodeQuotaExceeded, format, args...)
	e.Details = map[string]any{"quota": key, "limit": limit}
	return e
}
