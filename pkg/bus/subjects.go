package bus

import (
	"hash/fnv"
	"strings"

	"github.com/agentbus/agentbus/pkg/envelope"
)

// NoAggregate stands in the aggregate tokens of an event with no aggregate.
const NoAggregate = "_"

// Subjects builds and parses agentbus subjects under one prefix:
//
//	<prefix>.cmd.<tenant>.<CommandType>
//	<prefix>.evt.<tenant>.<aggType>.<aggToken>.<EventType>
//	<prefix>.syn.<tenant>.<aggType>.<aggToken>.<EventType>   (injected events)
//
// An event's aggregate token is its aggregate's shard (ShardOf), the id
// itself for the registrations agentbus keeps (IDInSubject), and "_" for
// an event of no aggregate. The aggregate id of every event on an
// aggregate is its HeaderAggregateID.
type Subjects struct{ Prefix string }

// AggregateShards is how many shards the aggregates of one type of one
// tenant are spread over in event subjects. The NATS server keeps an entry
// in memory for each subject a stream holds, for as long as it holds one
// of its messages: with the aggregate's shard in the subject instead of
// its id, that memory is bounded by tenants × aggregate types × event
// types × AggregateShards, however many aggregates there are. Changing it
// moves aggregates between shards: it is part of the subject contract.
const AggregateShards = 32

// ShardOf returns the shard token of an aggregate id: "~" and the two
// lowercase hex digits of FNV-1a (32 bits) of the id modulo
// AggregateShards, e.g. "~0a". No aggregate id has a "~".
func ShardOf(aggID string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(aggID))
	n := h.Sum32() % AggregateShards
	const hex = "0123456789abcdef"
	return string([]byte{'~', hex[n>>4], hex[n&15]})
}

// IsShard reports whether an aggregate token is a shard token.
func IsShard(token string) bool {
	if len(token) != 3 || token[0] != '~' {
		return false
	}
	for _, c := range []byte(token[1:]) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// The aggregate types of the registrations agentbus keeps itself
// (pkg/decide's control plane).
const (
	AggAgent        = "agent"
	AggService      = "service"
	AggSubscription = "subscription"
)

// IDInSubject reports whether the events of aggregates of aggType carry
// the aggregate's id in their subject rather than its shard: the
// registrations agentbus keeps itself, each of which costs a consumer or
// a registry record besides, and whose events agentbus reads by subject.
// Catalogue rules cannot name these types.
func IDInSubject(aggType string) bool {
	return aggType == AggAgent || aggType == AggService || aggType == AggSubscription
}

// aggregateToken is the aggregate token of an event of aggID of aggType;
// a wildcard id stays one.
func aggregateToken(aggType, aggID string) string {
	if IDInSubject(aggType) || aggID == "*" {
		return aggID
	}
	return ShardOf(aggID)
}

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

// Event is the subject of an event; an empty aggregate type gives the
// tokens "_._".
func (s Subjects) Event(root, tenant, aggType, aggID, typ string) string {
	token := NoAggregate
	if aggType == "" {
		aggType = NoAggregate
	} else {
		token = aggregateToken(aggType, aggID)
	}
	return s.Prefix + "." + root + "." + tenant + "." + aggType + "." + token + "." + typ
}

// TenantEvents matches every event of a tenant.
func (s Subjects) TenantEvents(root, tenant string) string {
	return s.Prefix + "." + root + "." + tenant + ".>"
}

// EventsOfType matches one event type of a tenant.
func (s Subjects) EventsOfType(root, tenant, typ string) string {
	return s.Prefix + "." + root + "." + tenant + ".*.*." + typ
}

// Aggregate matches every event of one aggregate: for a type whose
// aggregates are sharded, with the events of the others in its shard.
func (s Subjects) Aggregate(tenant, aggType, aggID string) string {
	return s.Prefix + ".evt." + tenant + "." + aggType + "." + aggregateToken(aggType, aggID) + ".*"
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

// ParseEvent returns the parts of an event subject, aggToken its
// aggregate token (an id, a shard or "_"). ok is false for another
// subject, or one whose tenant or aggregate token is not valid (see
// ParseCommand): a shard for a type whose ids are in the subject
// (IDInSubject) is not.
func (s Subjects) ParseEvent(subject string) (tenant, aggType, aggToken, typ string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.Prefix+".")
	if !found {
		return
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 5 || (parts[0] != RootEvents && parts[0] != RootSynthetic) ||
		!envelope.ValidTenant(parts[1]) || !envelope.ValidTokenID(parts[3]) && (IDInSubject(parts[2]) || !IsShard(parts[3])) {
		return
	}
	return parts[1], parts[2], parts[3], parts[4], true
}

// Pushed is the internal subject on which each replica tells the others
// of the events it pushed to its live listeners (pkg/pushlog), in
// batches over core NATS: never stored, read by agentbus alone.
func (s Subjects) Pushed() string { return s.Prefix + ".pushed" }
