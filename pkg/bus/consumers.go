package bus

import (
	"context"
	"strings"
	"time"
)

// ConsumerSpec is the wanted shape of a durable consumer on the command log,
// as agentbus creates it for a registered agent.
type ConsumerSpec struct {
	Name string
	// Description is shown by NATS tooling.
	Description string
	// Filters are the subjects delivered (exact, non-overlapping).
	Filters []string
	// StartSeq is the first stream sequence a new consumer delivers; when 0,
	// StartTime is used instead. Neither changes an existing consumer.
	StartSeq  uint64
	StartTime time.Time
	// Paused holds deliveries back until the consumer is put again with
	// Paused false; nothing is lost meanwhile.
	Paused bool
	// Metadata is stored with the consumer (keys starting "_nats" are the
	// server's own and are dropped).
	Metadata map[string]string
}

// ConsumerState is what the broker reports of a durable consumer.
type ConsumerState struct {
	Name     string
	Filters  []string
	Paused   bool
	Metadata map[string]string
	// Delivered is the stream sequence of the last message delivered at
	// least once; AckFloor the sequence up to which all are acknowledged.
	Delivered uint64
	AckFloor  uint64
	// NumPending counts messages not yet delivered; NumAckPending those
	// delivered and not yet acknowledged.
	NumPending    uint64
	NumAckPending int
}

// ConsumerAdmin manages durable consumers of one stream.
type ConsumerAdmin interface {
	// Consumer returns the state of the named consumer, or errs.ErrNotFound.
	Consumer(ctx context.Context, name string) (*ConsumerState, error)
	// PutConsumer creates the consumer described by spec, or updates the
	// existing one of that name in place (filters, pause state, metadata),
	// keeping its position. Idempotent. errs.ErrLimit when the stream
	// takes no more consumers.
	PutConsumer(ctx context.Context, spec ConsumerSpec) error
	// DeleteConsumer removes the named consumer; nil when it does not exist.
	DeleteConsumer(ctx context.Context, name string) error
	// Consumers returns the state of each of the stream's consumers whose
	// name begins with prefix, listed in pages (one request for many
	// consumers, not one each).
	Consumers(ctx context.Context, prefix string) ([]ConsumerState, error)
}

// Durable consumers agentbus keeps (streams/*.yaml), part of the NATS
// contract: ProcessorConsumer takes the command types agentbus processes
// itself off the command log; ControlConsumer (on the event log)
// reconciles agents' consumers; SubscriptionsConsumer (on the event log)
// deletes the subscriptions of deleted services and erases the secrets of
// deleted subscriptions.
const (
	ProcessorConsumer = "processor"
	// ReceiptsConsumer named the receipts' consumers of earlier versions
	// (on both logs), which agentbus removes at start; the name stays
	// agentbus's.
	ReceiptsConsumer      = "receipts"
	ControlConsumer       = "control"
	SubscriptionsConsumer = "subscriptions"
)

// AgentConsumerPrefix begins the name of every agent's consumer.
const AgentConsumerPrefix = "agent_"

// AgentConsumer is the durable consumer agentbus keeps on the command log
// for agent id of tenant: "agent_<tenant>_<id>". A tenant never contains
// "_", so two (tenant, id) pairs never share a name.
func AgentConsumer(tenant, id string) string { return AgentConsumerPrefix + tenant + "_" + id }

// ParseAgentConsumer returns the tenant and agent id of an agent's
// consumer name; ok is false for another name.
func ParseAgentConsumer(name string) (tenant, id string, ok bool) {
	rest, found := strings.CutPrefix(name, AgentConsumerPrefix)
	if !found {
		return "", "", false
	}
	tenant, id, ok = strings.Cut(rest, "_")
	return tenant, id, ok && tenant != "" && id != ""
}
