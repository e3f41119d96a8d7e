package project

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/settle"
)

// Metadata agentbus stores on an agent's consumer.
const (
	mdTenant       = "agentbus.tenant"
	mdAgent        = "agentbus.agent"
	mdRegistration = "agentbus.registration" // stream seq of the AgentRegistered it belongs to
	mdApplied      = "agentbus.applied"      // stream seq of the last agent event it reflects
)

// errNotYet asks for a retry: something this depends on is not projected yet.
var errNotYet = errors.New("not projected yet")

// AgentConsumers is the agent-consumer reconciler: for every agent event
// it makes the agent's durable consumer on the command log match the
// agent's latest state — created for a registered agent that accepts
// something, paused while the agent is paused, deleted with the agent. It
// reads the latest state rather than trusting the event, so projecting an
// event again, or an old one, is harmless. Safe for concurrent use.
type AgentConsumers struct {
	events    bus.Log
	consumers bus.ConsumerAdmin // of the command log
	receipts  *Receipts
	pending   *Pending
	agents    *Registry[decide.Agent]
	subj      bus.Subjects
	log       *slog.Logger
}

// NewAgentConsumers returns the reconciler of the agents' consumers
// (consumers: the command log's) from the event log.
func NewAgentConsumers(events bus.Log, consumers bus.ConsumerAdmin, receipts *Receipts, pending *Pending, agents *Registry[decide.Agent], subj bus.Subjects, log *slog.Logger) *AgentConsumers {
	return &AgentConsumers{events: events, consumers: consumers, receipts: receipts, pending: pending, agents: agents, subj: subj, log: log}
}

// Project reconciles the consumer of the agent an event is about; events
// of other aggregates, and subjects agentbus would not write, change
// nothing. It fails while the consumer is not right yet.
func (c *AgentConsumers) Project(ctx context.Context, m *bus.Message) error {
	tenant, aggType, id, _, ok := c.subj.ParseEvent(m.Subject)
	if !ok || aggType != decide.AggAgent {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 4*time.Second) // below the consumer's ack_wait
	defer cancel()
	if err := c.reconcile(rctx, tenant, id, m.Seq); err != nil {
		return fmt.Errorf("agent %s of tenant %s: %w", id, tenant, err)
	}
	return nil
}

// maxReconcileDeliveries bounds the tries of one agent event (about three
// minutes with the policy's backoff).
const maxReconcileDeliveries = 20

// Policy is how the control consumer settles: the consumer takes one event
// at a time, so an event that can never be reconciled must not hold up the
// others. A failure is retried with a growing pause, and given up (term,
// with an error log) after maxReconcileDeliveries unless NATS itself is
// unavailable.
func (c *AgentConsumers) Policy() settle.Policy {
	return settle.Policy{
		What: "reconcile an agent's consumer", Log: c.log,
		Backoff:  settle.Linear(200*time.Millisecond, 10*time.Second),
		Attempts: maxReconcileDeliveries,
		Endless:  func(err error) bool { return errors.Is(err, errs.ErrUnavailable) },
		Alarm:    func(err error, n uint64) bool { return !errors.Is(err, errNotYet) || n > 5 },
	}
}

func (c *AgentConsumers) reconcile(ctx context.Context, tenant, id string, atLeast uint64) error {
	name := bus.AgentConsumer(tenant, id)
	last, err := c.events.Last(ctx, c.subj.Aggregate(tenant, decide.AggAgent, id))
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return fmt.Errorf("no event found: %w", errNotYet)
	case err != nil:
		return err
	case last.Seq < atLeast:
		return fmt.Errorf("read event %d, older than %d: %w", last.Seq, atLeast, errNotYet)
	}
	_, _, _, lastType, _ := c.subj.ParseEvent(last.Subject)
	if lastType == decide.TypeAgentDeleted {
		return c.consumers.DeleteConsumer(ctx, name)
	}
	reg, err := c.events.Last(ctx, c.subj.Event(bus.RootEvents, tenant, decide.AggAgent, id, decide.TypeAgentRegistered))
	switch {
	case errors.Is(err, errs.ErrNotFound):
		// Events of an agent that was never registered here (or whose
		// registration aged out of the event log): no consumer.
		c.log.Warn("agent events without a registration; no consumer", "tenant", tenant, "agent", id)
		return c.consumers.DeleteConsumer(ctx, name)
	case err != nil:
		return fmt.Errorf("registration: %w", err)
	}
	data, err := decide.EventData(reg)
	rec, ok := decide.RegistrationOf(id, data)
	if err != nil || !ok {
		// Not what agentbus writes (any NATS publisher can append to the
		// log): its types must not become consumer filters.
		c.log.Error("agent registration event unreadable, or not this agent's, or with invalid types; no consumer", "tenant", tenant, "agent", id, "seq", reg.Seq, "err", err)
		return nil
	}
	if len(rec.Accepts) == 0 {
		return c.consumers.DeleteConsumer(ctx, name) // accepts nothing: no consumer
	}
	paused := lastType == decide.TypeAgentPaused
	regSeq := strconv.FormatUint(reg.Seq, 10)
	cur, err := c.consumers.Consumer(ctx, name)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		cur = nil
	case err != nil:
		return err
	case cur.Metadata[mdRegistration] != regSeq:
		// The consumer of an earlier registration of this id: start afresh.
		if err := c.consumers.DeleteConsumer(ctx, name); err != nil {
			return err
		}
		cur = nil
	case appliedSeq(cur) >= last.Seq && cur.Paused == paused:
		return nil
	}
	spec := bus.ConsumerSpec{
		Name:        name,
		Description: fmt.Sprintf("agentbus agent %s of tenant %s", id, tenant),
		Paused:      paused,
		Metadata: map[string]string{mdTenant: tenant, mdAgent: id, mdRegistration: regSeq,
			mdApplied: strconv.FormatUint(last.Seq, 10)},
	}
	for _, t := range rec.Accepts {
		spec.Filters = append(spec.Filters, c.subj.Command(tenant, t))
	}
	if cur == nil {
		if spec.StartSeq, spec.StartTime, err = c.start(ctx, tenant, reg); err != nil {
			return err
		}
	}
	return c.consumers.PutConsumer(ctx, spec)
}

func appliedSeq(st *bus.ConsumerState) uint64 {
	n, _ := strconv.ParseUint(st.Metadata[mdApplied], 10, 64)
	return n
}

// start is where a new agent consumer starts: right after the
// RegisterAgent command in the command log, so it gets every command of its
// types accepted after its registration was, and none from before. The
// command's sequence comes from its receipt or, while the receipt has not
// recorded it yet (after a crash the receipts consumer redelivers only after
// its ack wait), from the command log past the processor consumer's ack
// floor. When neither has it, a registration under two minutes old is
// looked up again later (errNotYet: the command may not be visible yet);
// an older one (past the receipt TTL, say) starts the consumer at the
// registration event's time, as does a registration event that names no
// command.
func (c *AgentConsumers) start(ctx context.Context, tenant string, reg *bus.Message) (uint64, time.Time, error) {
	if seq, err := strconv.ParseUint(reg.Header.Get(bus.HeaderCommandSeq), 10, 64); err == nil && seq > 0 {
		return seq + 1, time.Time{}, nil // stamped by the processor that wrote it
	}
	corr := decide.CorrelationOf(reg)
	if corr == "" {
		// Published straight to NATS without naming its command: there is
		// no command to start after.
		return 0, reg.Time, nil
	}
	r, err := c.receipts.Get(ctx, tenant, corr)
	switch {
	case err == nil && r.CommandSeq > 0:
		return r.CommandSeq + 1, time.Time{}, nil
	case err != nil && !errors.Is(err, errs.ErrNotFound):
		return 0, time.Time{}, err
	}
	seq, err := c.pending.Find(ctx, c.subj.Command(tenant, decide.TypeRegisterAgent), corr)
	switch {
	case err != nil:
		return 0, time.Time{}, err
	case seq > 0:
		return seq + 1, time.Time{}, nil
	case time.Since(reg.Time) > 2*time.Minute:
		return 0, reg.Time, nil
	}
	return 0, time.Time{}, fmt.Errorf("registration command %s: %w", corr, errNotYet)
}

// Settled reports whether the agent's consumer reflects the agent event at
// seq (deleted: the consumer is gone).
func (c *AgentConsumers) Settled(ctx context.Context, tenant, id string, seq uint64, deleted bool) (bool, error) {
	st, err := c.consumers.Consumer(ctx, bus.AgentConsumer(tenant, id))
	if errors.Is(err, errs.ErrNotFound) {
		if deleted {
			return true, nil
		}
		rec, ok := c.agents.Get(tenant, id)
		return ok && len(rec.Accepts) == 0, nil // no consumer is right for an agent accepting nothing
	}
	if err != nil {
		return false, err
	}
	if deleted {
		reg, _ := strconv.ParseUint(st.Metadata[mdRegistration], 10, 64)
		return reg > seq, nil // only a later registration's consumer is left
	}
	return appliedSeq(st) >= seq, nil
}

// maxPendingScan bounds Pending.Find: past it a command counts as not
// found.
const maxPendingScan = 10_000

// Pending finds commands among those the processor has not acknowledged
// yet.
type Pending struct {
	commands  bus.Log
	consumers bus.ConsumerAdmin // of the command log
	subj      bus.Subjects
}

// NewPending returns the finder on the command log and its consumers.
func NewPending(commands bus.Log, consumers bus.ConsumerAdmin, subj bus.Subjects) *Pending {
	return &Pending{commands: commands, consumers: consumers, subj: subj}
}

// Find returns the command-log sequence of the command matching filter
// with correlation id corr among those the processor has not acknowledged
// yet (every earlier one is processed: its events carry its sequence and
// its receipt exists), or 0 when it is not there. It reads up to
// maxPendingScan commands: callers bound how many run at once.
func (p *Pending) Find(ctx context.Context, filter, corr string) (uint64, error) {
	st, err := p.consumers.Consumer(ctx, bus.ProcessorConsumer)
	if err != nil {
		return 0, fmt.Errorf("processor consumer: %w", err)
	}
	for from, seen := st.AckFloor+1, 0; seen < maxPendingScan; {
		msgs, err := p.commands.Range(ctx, filter, from, replayBatch)
		if err != nil || len(msgs) == 0 {
			return 0, err
		}
		for _, m := range msgs {
			// The id the processor gives the command (decide.ReadEnvelope).
			tenant, _, _ := p.subj.ParseCommand(m.Subject)
			if envelope.ReadLoose(m.Data).CorrelationID(tenant) == corr {
				return m.Seq, nil
			}
		}
		from = msgs[len(msgs)-1].Seq + 1
		seen += len(msgs)
	}
	return 0, nil
}
