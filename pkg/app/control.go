package app

// The control plane: agents and services as event-sourced aggregates.
//
// Commands RegisterAgent, PauseAgent, ResumeAgent, DeleteAgent,
// RegisterService and DeleteService are decided here like any other command
// (the processor consumer takes them), and their events are the truth:
//
//	agentbus.evt.<tenant>.agent.<id>.AgentRegistered|AgentPaused|AgentResumed|AgentDeleted
//	agentbus.evt.<tenant>.service.<id>.ServiceRegistered|ServiceDeleted
//
// Everything else follows the events:
//   - the registries (registry.go) are in-memory projections each replica
//     builds from the event log at start and keeps current by following it;
//   - the control reactor (ReconcileAgents, on the durable consumer "control")
//     makes each agent's command consumer match the agent's latest state.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// Control-plane command and event types, and their aggregate types.
const (
	TypeRegisterAgent     = "RegisterAgent"
	TypePauseAgent        = "PauseAgent"
	TypeResumeAgent       = "ResumeAgent"
	TypeDeleteAgent       = "DeleteAgent"
	TypeRegisterService   = "RegisterService"
	TypeDeleteService     = "DeleteService"
	TypeAgentRegistered   = "AgentRegistered"
	TypeAgentPaused       = "AgentPaused"
	TypeAgentResumed      = "AgentResumed"
	TypeAgentDeleted      = "AgentDeleted"
	TypeServiceRegistered = "ServiceRegistered"
	TypeServiceDeleted    = "ServiceDeleted"

	AggAgent   = "agent"
	AggService = "service"
)

// Agent statuses.
const (
	AgentActive = "active"
	AgentPaused = "paused"
)

// ProcessorConsumer is the durable consumer of agentbus's own processor on
// the command log (streams/20-consumers.yaml).
const ProcessorConsumer = "processor"

// ReceiptsConsumer is the durable consumer on the event log that projects
// events into their commands' receipts (streams/20-consumers.yaml).
const ReceiptsConsumer = "receipts"

// control holds the control plane's state inside App.
type control struct {
	agents   *registry[Agent]
	services *registry[Service]
}

func newControl(a *App) *control {
	c := &control{
		agents:   newRegistry(a.subj, a.log, AggAgent, foldAgent),
		services: newRegistry(a.subj, a.log, AggService, foldService),
	}
	a.Handle(TypeRegisterAgent, DeciderFunc(a.decideRegister(AggAgent, TypeAgentRegistered, TypeAgentDeleted, errs.CodeAgentAlreadyRegistered)))
	a.Handle(TypePauseAgent, DeciderFunc(a.decideAgentChange(TypePauseAgent)))
	a.Handle(TypeResumeAgent, DeciderFunc(a.decideAgentChange(TypeResumeAgent)))
	a.Handle(TypeDeleteAgent, DeciderFunc(a.decideAgentChange(TypeDeleteAgent)))
	a.Handle(TypeRegisterService, DeciderFunc(a.decideRegister(AggService, TypeServiceRegistered, TypeServiceDeleted, errs.CodeServiceAlreadyExists)))
	a.Handle(TypeDeleteService, DeciderFunc(a.decideDeleteService))
	return c
}

// registration is the data of RegisterAgent / RegisterService and, with
// status and createdAt, of their events.
type registration struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Accepts     []string `json:"accepts"`
	Produces    []string `json:"produces"`
	Status      string   `json:"status,omitempty"`
	CreatedAt   string   `json:"createdAt"`
}

// change is the data of the other control-plane events.
type change struct {
	ID string `json:"id"`
	At string `json:"at"`
}

func (a *App) stamp() string { return a.now().UTC().Format(time.RFC3339Nano) }

// aggregateHead is the latest event of an aggregate.
type aggregateHead struct {
	last *bus.Message // nil when the aggregate has no event
	typ  string       // type of last
	mine bool         // last was written by the command being decided
}

func (a *App) head(ctx context.Context, s State, cmd Command, aggType, id string) (aggregateHead, error) {
	last, err := s.LastEvent(ctx, cmd.Tenant, aggType, id)
	if errors.Is(err, errs.ErrNotFound) {
		return aggregateHead{}, nil
	}
	if err != nil {
		return aggregateHead{}, err
	}
	_, _, _, typ, _ := a.subj.ParseEvent(last.Subject)
	return aggregateHead{last: last, typ: typ, mine: last.Header.Get(bus.HeaderCorrelationID) == cmd.CorrelationID}, nil
}

func (h aggregateHead) seq() uint64 {
	if h.last == nil {
		return 0
	}
	return h.last.Seq
}

// decideRegister decides RegisterAgent / RegisterService: the aggregate must
// have no event, or its last event must be the deletion (an id can be
// registered again after it was deleted). An id left out of the data is the
// command's correlation id, so a redelivery registers the same id.
func (a *App) decideRegister(aggType, registered, deleted string, taken errs.Code) func(context.Context, Command, State) (Decision, error) {
	return func(ctx context.Context, cmd Command, s State) (Decision, error) {
		var in registration
		if err := json.Unmarshal(cmd.Envelope.Data, &in); err != nil {
			return Rejected(errs.CodeValidationFailed, "data is not a %s registration: %v", aggType, err), nil
		}
		if in.ID == "" {
			in.ID = cmd.CorrelationID
		}
		if !envelope.ValidTokenID(in.ID) {
			return Rejected(errs.CodeValidationFailed, "id must be "+idRule), nil
		}
		if aggType == AggAgent {
			for _, t := range in.Accepts {
				if why := a.cannotAccept(t); why != "" {
					return Rejected(errs.CodeValidationFailed, "accepts: %s", why), nil
				}
			}
		}
		h, err := a.head(ctx, s, cmd, aggType, in.ID)
		switch {
		case err != nil:
			return Decision{}, err
		case h.mine:
			return Decision{}, nil // a redelivery of the command that wrote it
		case h.last != nil && h.typ != deleted:
			return Rejected(taken, "%s %q is already registered", aggType, in.ID), nil
		}
		out := registration{ID: in.ID, Name: in.Name, Description: in.Description,
			Accepts: nonNil(in.Accepts), Produces: nonNil(in.Produces), CreatedAt: a.stamp()}
		if aggType == AggAgent {
			out.Status = AgentActive
		}
		ev := NewEvent{Type: registered, AggType: aggType, AggID: in.ID, Data: mustJSON(out)}
		return Decision{Events: []NewEvent{ev}, Expect: &bus.Expect{LastSeq: h.seq()}}, nil
	}
}

// cannotAccept says why an agent cannot accept command type t, or returns
// "" when it can: a type agentbus processes itself is not handed to agents.
func (a *App) cannotAccept(t string) string {
	if _, ok := a.deciders[t]; ok {
		return t + " is processed by agentbus itself (a built-in processor or a catalogue rule); an agent cannot take it over"
	}
	return ""
}

func deref(d *Decision) Decision {
	if d == nil {
		return Decision{}
	}
	return *d
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// registered reads the aggregate a change command (pause, resume, delete)
// names by data.id. When the decision is made already (an invalid id, an
// aggregate not registered, a redelivery of the command that wrote the
// last event), done holds it.
func (a *App) registered(ctx context.Context, s State, cmd Command, aggType, deleted string, notFound errs.Code) (id string, h aggregateHead, done *Decision, err error) {
	var in struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(cmd.Envelope.Data, &in)
	id = in.ID
	if !envelope.ValidTokenID(id) {
		d := Rejected(errs.CodeValidationFailed, "id must be "+idRule)
		return id, h, &d, nil
	}
	h, err = a.head(ctx, s, cmd, aggType, id)
	switch {
	case err != nil:
		return id, h, nil, err
	case h.mine:
		return id, h, &Decision{}, nil
	case h.last == nil || h.typ == deleted:
		d := Rejected(notFound, "%s %q is not registered", aggType, id)
		return id, h, &d, nil
	}
	return id, h, nil, nil
}

// decideAgentChange decides PauseAgent, ResumeAgent and DeleteAgent from the
// agent's last event: none or AgentDeleted → AGENT_NOT_FOUND; pausing a
// paused agent → AGENT_ALREADY_PAUSED; resuming an agent that is not paused
// → AGENT_NOT_PAUSED.
func (a *App) decideAgentChange(cmdType string) func(context.Context, Command, State) (Decision, error) {
	return func(ctx context.Context, cmd Command, s State) (Decision, error) {
		id, h, done, err := a.registered(ctx, s, cmd, AggAgent, TypeAgentDeleted, errs.CodeAgentNotFound)
		if err != nil || done != nil {
			return deref(done), err
		}
		var typ string
		switch cmdType {
		case TypePauseAgent:
			if h.typ == TypeAgentPaused {
				return Rejected(errs.CodeAgentAlreadyPaused, "agent %q is already paused", id), nil
			}
			typ = TypeAgentPaused
		case TypeResumeAgent:
			if h.typ != TypeAgentPaused {
				return Rejected(errs.CodeAgentNotPaused, "agent %q is not paused", id), nil
			}
			typ = TypeAgentResumed
		default:
			typ = TypeAgentDeleted
		}
		ev := NewEvent{Type: typ, AggType: AggAgent, AggID: id, Data: mustJSON(change{ID: id, At: a.stamp()})}
		return Decision{Events: []NewEvent{ev}, Expect: &bus.Expect{LastSeq: h.seq()}}, nil
	}
}

// decideDeleteService decides DeleteService: ServiceDeleted.
func (a *App) decideDeleteService(ctx context.Context, cmd Command, s State) (Decision, error) {
	id, h, done, err := a.registered(ctx, s, cmd, AggService, TypeServiceDeleted, errs.CodeServiceNotFound)
	if err != nil || done != nil {
		return deref(done), err
	}
	ev := NewEvent{Type: TypeServiceDeleted, AggType: AggService, AggID: id, Data: mustJSON(change{ID: id, At: a.stamp()})}
	return Decision{Events: []NewEvent{ev}, Expect: &bus.Expect{LastSeq: h.seq()}}, nil
}

// AgentConsumerName is the durable consumer agentbus keeps on the command log
// for agent id of tenant: "agent_<tenant>_<id>". A tenant never contains
// "_", so two (tenant, id) pairs never share a name.
func AgentConsumerName(tenant, id string) string { return agentConsumerPrefix + tenant + "_" + id }

// agentConsumerPrefix begins the name of every agent's consumer.
const agentConsumerPrefix = "agent_"

// Metadata agentbus stores on an agent's consumer.
const (
	mdTenant       = "agentbus.tenant"
	mdAgent        = "agentbus.agent"
	mdRegistration = "agentbus.registration" // stream seq of the AgentRegistered it belongs to
	mdApplied      = "agentbus.applied"      // stream seq of the last agent event it reflects
)

// errNotYet asks for a retry: something this depends on is not projected yet.
var errNotYet = errors.New("not projected yet")

// ReconcileAgents is the handler of the control reactor (durable consumer
// "control" on the agent events, one event at a time across all replicas).
// For every agent event it makes the agent's consumer match the agent's
// latest state: created for a registered agent that accepts something,
// paused while the agent is paused, deleted with the agent. It reads the
// latest state rather than trusting the event, so replaying old events is
// harmless, and acks only once the consumer is right; failures nak with
// backoff.
//
// The reactor takes one event at a time, so an event it can never
// reconcile must not hold up the others: subjects agentbus would not write
// are acked unread, and an event still failing after maxReconcileDeliveries
// (other than because NATS is unavailable) is terminated with an error log.
func (a *App) ReconcileAgents(ctx context.Context, d bus.Delivery) {
	m := d.Message()
	tenant, aggType, id, _, ok := a.subj.ParseEvent(m.Subject)
	if !ok || aggType != AggAgent || a.p.Consumers == nil {
		_ = d.Ack(ctx)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 4*time.Second) // below the consumer's ack_wait
	err := a.reconcileAgent(rctx, tenant, id, m.Seq)
	cancel()
	if err == nil {
		_ = d.Ack(ctx)
		return
	}
	n := d.NumDelivered()
	if n >= maxReconcileDeliveries && !errors.Is(err, errs.ErrUnavailable) {
		a.log.Error("agent consumer not reconciled; giving up on this event", "tenant", tenant, "agent", id, "seq", m.Seq, "err", err, "delivery", n)
		_ = d.Term(err.Error())
		return
	}
	level := a.log.Warn
	if !errors.Is(err, errNotYet) || n > 5 {
		level = a.log.Error
	}
	level("agent consumer not reconciled; will retry", "tenant", tenant, "agent", id, "err", err, "delivery", n)
	_ = d.Nak(min(time.Duration(n)*200*time.Millisecond, 10*time.Second))
}

// maxReconcileDeliveries bounds the tries of one agent event (about three
// minutes with the backoff above).
const maxReconcileDeliveries = 20

func (a *App) reconcileAgent(ctx context.Context, tenant, id string, atLeast uint64) error {
	name := AgentConsumerName(tenant, id)
	last, err := a.p.Events.Last(ctx, a.subj.Aggregate(tenant, AggAgent, id))
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return fmt.Errorf("agent %s: no event found: %w", id, errNotYet)
	case err != nil:
		return err
	case last.Seq < atLeast:
		return fmt.Errorf("agent %s: read event %d, older than %d: %w", id, last.Seq, atLeast, errNotYet)
	}
	_, _, _, lastType, _ := a.subj.ParseEvent(last.Subject)
	if lastType == TypeAgentDeleted {
		return a.p.Consumers.DeleteConsumer(ctx, name)
	}
	reg, err := a.p.Events.Last(ctx, a.subj.Event(RootEvents, tenant, AggAgent, id, TypeAgentRegistered))
	switch {
	case errors.Is(err, errs.ErrNotFound):
		// Events of an agent that was never registered here (or whose
		// registration aged out of the event log): no consumer.
		a.log.Warn("agent events without a registration; no consumer", "tenant", tenant, "agent", id)
		return a.p.Consumers.DeleteConsumer(ctx, name)
	case err != nil:
		return fmt.Errorf("agent %s: registration: %w", id, err)
	}
	data, err := eventData(reg)
	rec, ok := registrationOf(id, data)
	if err != nil || !ok {
		// Not what agentbus writes (any NATS publisher can append to the
		// log): its types must not become consumer filters.
		a.log.Error("agent registration event unreadable, or not this agent's, or with invalid types; no consumer", "tenant", tenant, "agent", id, "seq", reg.Seq, "err", err)
		return nil
	}
	if len(rec.Accepts) == 0 {
		return a.p.Consumers.DeleteConsumer(ctx, name) // accepts nothing: no consumer
	}
	paused := lastType == TypeAgentPaused
	regSeq := strconv.FormatUint(reg.Seq, 10)
	cur, err := a.p.Consumers.Consumer(ctx, name)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		cur = nil
	case err != nil:
		return err
	case cur.Metadata[mdRegistration] != regSeq:
		// The consumer of an earlier registration of this id: start afresh.
		if err := a.p.Consumers.DeleteConsumer(ctx, name); err != nil {
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
		spec.Filters = append(spec.Filters, a.subj.Command(tenant, t))
	}
	if cur == nil {
		if spec.StartSeq, spec.StartTime, err = a.consumerStart(ctx, tenant, reg); err != nil {
			return err
		}
	}
	return a.p.Consumers.PutConsumer(ctx, spec)
}

func appliedSeq(st *bus.ConsumerState) uint64 {
	n, _ := strconv.ParseUint(st.Metadata[mdApplied], 10, 64)
	return n
}

// consumerStart is where a new agent consumer starts: right after the
// RegisterAgent command in the command log, so it gets every command of its
// types accepted after its registration was, and none from before. The
// command's sequence comes from its receipt or, while the receipt has not
// recorded it yet (after a crash the receipts consumer redelivers only after
// its ack wait), from the command log past the receipts consumer's ack
// floor. When neither has it, a registration under two minutes old is
// looked up again later (errNotYet: the command may not be visible yet);
// an older one (past the receipt TTL, say) starts the consumer at the
// registration event's time, as does a registration event that names no
// command.
func (a *App) consumerStart(ctx context.Context, tenant string, reg *bus.Message) (uint64, time.Time, error) {
	if seq, err := strconv.ParseUint(reg.Header.Get(bus.HeaderCommandSeq), 10, 64); err == nil && seq > 0 {
		return seq + 1, time.Time{}, nil // stamped by the processor that wrote it
	}
	corr := correlationOf(reg)
	if corr == "" {
		// Published straight to NATS without naming its command: there is
		// no command to start after.
		return 0, reg.Time, nil
	}
	r, err := a.Receipt(ctx, tenant, corr)
	switch {
	case err == nil && r.CommandSeq > 0:
		return r.CommandSeq + 1, time.Time{}, nil
	case err != nil && !errors.Is(err, errs.ErrNotFound):
		return 0, time.Time{}, err
	}
	seq, err := a.findPending(ctx, a.subj.Command(tenant, TypeRegisterAgent), corr)
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

// maxPendingScan bounds findPending: past it a command counts as not found.
const maxPendingScan = 10_000

// maxScans bounds the scans for traces running at once, and scanWait how
// long a trace waits for its turn.
const (
	maxScans = 4
	scanWait = 5 * time.Second
)

// scanTurn waits, at most scanWait, for one of the maxScans turns to scan
// the pending commands for a caller: any caller can ask for a scan (the
// trace of an unknown id costs a whole one). It returns the function that
// ends the turn, or a SERVICE_UNAVAILABLE error saying so.
func (a *App) scanTurn(ctx context.Context) (func(), error) {
	ctx, cancel := context.WithTimeout(ctx, scanWait)
	defer cancel()
	select {
	case a.scans <- struct{}{}:
		return func() { <-a.scans }, nil
	case <-ctx.Done():
		return nil, errs.Unavailable("too many trace lookups at once; retry shortly")
	}
}

// findPending returns the command-log sequence of the command matching
// filter with correlation id corr among those the processor has not
// acknowledged yet (every earlier one is processed: its events carry its
// sequence and its receipt exists), or 0 when it is not there.
func (a *App) findPending(ctx context.Context, filter, corr string) (uint64, error) {
	if a.p.Consumers == nil || a.p.Commands == nil {
		return 0, nil
	}
	st, err := a.p.Consumers.Consumer(ctx, ProcessorConsumer)
	if err != nil {
		return 0, fmt.Errorf("processor consumer: %w", err)
	}
	for from, seen := st.AckFloor+1, 0; seen < maxPendingScan; {
		msgs, err := a.p.Commands.Range(ctx, filter, from, replayBatch)
		if err != nil || len(msgs) == 0 {
			return 0, err
		}
		for _, m := range msgs {
			// The id the processor gives the command (readEnvelope).
			tenant, _, _ := a.subj.ParseCommand(m.Subject)
			if looseCorrelationID(tenant, m.Data) == corr {
				return m.Seq, nil
			}
		}
		from = msgs[len(msgs)-1].Seq + 1
		seen += len(msgs)
	}
	return 0, nil
}

// agentConsumerSettled reports whether the agent's consumer reflects the
// agent event at seq (deleted: the consumer is gone).
func (a *App) agentConsumerSettled(ctx context.Context, tenant, id string, seq uint64, deleted bool) (bool, error) {
	if a.p.Consumers == nil {
		return true, nil
	}
	st, err := a.p.Consumers.Consumer(ctx, AgentConsumerName(tenant, id))
	if errors.Is(err, errs.ErrNotFound) {
		if deleted {
			return true, nil
		}
		rec, ok := a.ctl.agents.get(tenant, id)
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
