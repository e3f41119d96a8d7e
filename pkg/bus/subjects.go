package bus

import (
	"github.com/agentbus/agentbus/pkg/envelope"
	"strings"
)

// NoAggregate stands in the aggregate tokens of an event with no aggregate.
const NoAggregate = "_"

// Subjects builds and parses agentbus subjects under one prefix:
//
//	<prefix>.cmd.<tenant>.<CommandType>
//	<prefix>.evt.<tenant>.<aggType>.<aggId>.<EventType>
//	<prefix>.syn.<tenant>.<aggType>.<aggId>.<EventType>   (injected events)
type Subjects struct{ Prefix string }

// Command is the subject of a command.
func (s Subjects) Command(tenant, typ string) string {
	return s.Prefix + ".cmd." + tenant + "." + typ
}

// TenantCommands matches every command of a tenant.
func (s Subjects) TenantCommands(tenant string) string { return s.Prefix + ".cmd." + tenant + ".>" }

// AllCommands matches every command of every tenant.
func (s Subjects) AllCommands() string { return s.Prefix + ".cmd.>" }

// CommandsOfType matches one command type across tenants.
func (s Subjects) CommandsOfType(typ string) string { return s.Prefix + ".cmd.*." + typ }

// Event is the subject of an event; empty aggregate tokens become "_".
func (s Subjects) Event(root, tenant, aggType, aggID, typ string) string {
	if aggType == "" {
		aggType, aggID = NoAggregate, NoAggregate
	}
	return s.Prefix + "." + root + "." + tenant + "." + aggType + "." + aggID + "." + typ
}

// TenantEvents matches every event of a tenant.
func (s Subjects) TenantEvents(root, tenant string) string {
	return s.Prefix + "." + root + "." + tenant + ".>"
}

// EventsOfType matches one event type of a tenant.
func (s Subjects) EventsOfType(root, tenant, typ string) string {
	return s.Prefix + "." + root + "." + tenant + ".*.*." + typ
}

// Aggregate matches every event of one aggregate.
func (s Subjects) Aggregate(tenant, aggType, aggID string) string {
	return s.Prefix + ".evt." + tenant + "." + aggType + "." + aggID + ".*"
}

// TypedEvent returns the tenant and type tokens of an event subject under
// root exactly as EventsOfType matches them: ok is false for a subject no
// type filter matches (not <prefix>.<root> and four non-empty tokens).
// Unlike ParseEvent it does not check the tokens further.
func (s Subjects) TypedEvent(root, subject string) (tenant, typ string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.Prefix+"."+root+".")
	if !found {
		return "", "", false
	}
	tenant, rest, _ = strings.Cut(rest, ".")
	agg, rest, _ := strings.Cut(rest, ".")
	id, typ, _ := strings.Cut(rest, ".")
	if tenant == "" || agg == "" || id == "" || typ == "" || strings.Contains(typ, ".") {
		return "", "", false
	}
	return tenant, typ, true
}

// Roots of event subjects.
const (
	RootEvents    = "evt"
	RootSynthetic = "syn"
)

// ParseCommand returns the tenant and type of a command subject. ok is
// false for another subject, or one whose tenant is not a valid tenant id
// (anyone with NATS access can publish such a subject; nothing keyed by it
// could be addressed over REST).
func (s Subjects) ParseCommand(subject string) (tenant, typ string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.Prefix+".cmd.")
	if !found {
		return "", "", false
	}
	tenant, typ, ok = strings.Cut(rest, ".")
	return tenant, typ, ok && !strings.Contains(typ, ".") && envelope.ValidTenant(tenant)
}

// ParseEvent returns the parts of an event subject. ok is false for
// another subject, or one whose tenant or aggregate id is not valid (see
// ParseCommand).
func (s Subjects) ParseEvent(subject string) (tenant, aggType, aggID, typ string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.Prefix+".")
	if !found {
		return
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 5 || (parts[0] != RootEvents && parts[0] != RootSynthetic) ||
		!envelope.ValidTenant(parts[1]) || !envelope.ValidTokenID(parts[3]) {
		return
	}
	return parts[1], parts[2], parts[3], parts[4], true
}

// Pushed is the internal subject on which each replica tells the others
// of the events it pushed to its live listeners (pkg/pushlog), in
// batches over core NATS: never stored, read by agentbus alone.
func (s Subjects) Pushed() string { return s.Prefix + ".pushed" }
