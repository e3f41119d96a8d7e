package decide

// The control plane: agents, services and webhook subscriptions as
// event-sourced aggregates.
//
// Commands RegisterAgent, PauseAgent, ResumeAgent, DeleteAgent,
// RegisterService and DeleteService are decided here like any other
// command, and their events are the truth:
//
//	agentbus.evt.<tenant>.agent.<id>.AgentRegistered|AgentPaused|AgentResumed|AgentDeleted
//	agentbus.evt.<tenant>.service.<id>.ServiceRegistered|ServiceDeleted
//
// The subscription commands are in subscriptions.go. Everything else
// follows the events (pkg/projection): the registries fold them into records
// (Fold* below), the agent-consumer reconciler makes each agent's command
// consumer match the agent's latest state, and the subscription cascade
// deletes the subscriptions of a deleted service.

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// Control-plane command and event types, and their aggregate types.
const (
	TypeRegisterAgent   = "RegisterAgent"
	TypePauseAgent      = "PauseAgent"
	TypeResumeAgent     = "ResumeAgent"
	TypeDeleteAgent     = "DeleteAgent"
	TypeRegisterService = "RegisterService"
	TypeDeleteService   = "DeleteService"
	TypeAgentRegistered = "AgentRegistered"
	TypeAgentPaused     = "AgentPaused"
	TypeAgentResumed    = "AgentResumed"
	TypeAgentDeleted    = "AgentDeleted"
	// TypeAgentConsumerFailed is written by the agent-consumer
	// reconciler (pkg/projection), not decided: the agent's consumer could
	// not be made to match the agent's state.
	TypeAgentConsumerFailed = "AgentConsumerFailed"
	TypeServiceRegistered   = "ServiceRegistered"
	TypeServiceDeleted      = "ServiceDeleted"

	AggAgent   = bus.AggAgent
	AggService = bus.AggService
)

// Agent statuses. An agent is failed when its last event is
// AgentConsumerFailed: it is registered, active or paused as before, but
// its consumer does not match that.
const (
	AgentActive = "active"
	AgentPaused = "paused"
	AgentFailed = "failed"
)

// MaxConsumerFilters is the most types an agent's consumer filters on:
// NATS checks a consumer's filters pairwise, so a registration listing
// more (not what agentbus writes) gets no consumer.
const MaxConsumerFilters = 1024

// ConsumerFailure is the data of AgentConsumerFailed.
type ConsumerFailure struct {
	ID string `json:"id"`
	At string `json:"at"`
	// Status is the status the consumer was to have (AgentActive or
	// AgentPaused): the agent's, as of its event before.
	Status string `json:"status"`
	Error  string `json:"error"`
}

// PausedAt reports whether an agent whose last event is m, of type typ,
// is paused: m is AgentPaused, or AgentConsumerFailed while paused.
func PausedAt(typ string, m *bus.Message) bool {
	switch typ {
	case TypeAgentPaused:
		return true
	case TypeAgentConsumerFailed:
		var f ConsumerFailure
		data, err := EventData(m)
		return err == nil && json.Unmarshal(data, &f) == nil && f.Status == AgentPaused
	}
	return false
}

// ControlPlane decides the control-plane commands.
type ControlPlane struct {
	Subjects bus.Subjects
	// Now stamps registrations and changes; default time.Now.
	Now func() time.Time
	// ProcessedHere reports whether agentbus processes command type t
	// itself: an agent cannot accept such a type. Default: none.
	ProcessedHere func(t string) bool
	// Quotas bound the registrations of new ids; the zero Quotas, none.
	Quotas Quotas
	// Subscriptions, when set, makes the subscription commands part of
	// the control plane (subscriptions.go), deciding with these ports.
	Subscriptions *SubscriptionPorts
}

// Deciders returns the control plane's deciders by command type: agents,
// services and, with Subscriptions set, subscriptions.
func (c ControlPlane) Deciders() map[string]Decider {
	d := map[string]Decider{
		TypeRegisterAgent:   DeciderFunc(c.decideRegister(AggAgent, TypeAgentRegistered, TypeAgentDeleted, errs.CodeAgentAlreadyRegistered)),
		TypePauseAgent:      DeciderFunc(c.decideAgentChange(TypePauseAgent)),
		TypeResumeAgent:     DeciderFunc(c.decideAgentChange(TypeResumeAgent)),
		TypeDeleteAgent:     DeciderFunc(c.decideAgentChange(TypeDeleteAgent)),
		TypeRegisterService: DeciderFunc(c.decideRegister(AggService, TypeServiceRegistered, TypeServiceDeleted, errs.CodeServiceAlreadyExists)),
		TypeDeleteService:   DeciderFunc(c.decideDeleteService),
	}
	if c.Subscriptions != nil {
		maps.Copy(d, c.subscriptionDeciders())
	}
	return d
}

// Registration is the data of RegisterAgent / RegisterService and, with
// status and createdAt, of their events.
type Registration struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Accepts     []string `json:"accepts"`
	Produces    []string `json:"produces"`
	Status      string   `json:"status,omitempty"`
	CreatedAt   string   `json:"createdAt"`
}

// Change is the data of the other control-plane events.
type Change struct {
	ID string `json:"id"`
	At string `json:"at"`
}

// Stamp is a time as control-plane events carry it.
func Stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func (c ControlPlane) stamp() string {
	if c.Now == nil {
		return Stamp(time.Now())
	}
	return Stamp(c.Now())
}

// aggregateHead is the latest event of an aggregate.
type aggregateHead struct {
	last   *bus.Message // nil when the aggregate has no event
	typ    string       // type of last
	mine   bool         // last was written by the command being decided
	paused bool         // an agent paused as of last (PausedAt)
}

func (c ControlPlane) head(ctx context.Context, s State, cmd Command, aggType, id string) (aggregateHead, error) {
	last, err := s.LastEvent(ctx, cmd.Tenant, aggType, id)
	if errors.Is(err, errs.ErrNotFound) {
		return aggregateHead{}, nil
	}
	if err != nil {
		return aggregateHead{}, err
	}
	_, _, _, typ, _ := c.Subjects.ParseEvent(last.Subject)
	return aggregateHead{last: last, typ: typ, mine: last.Header.Get(bus.HeaderCorrelationID) == cmd.CorrelationID,
		paused: aggType == AggAgent && PausedAt(typ, last)}, nil
}

func (h aggregateHead) seq() uint64 {
	if h.last == nil {
		return 0
	}
	return h.last.Seq
}

// decideRegister decides RegisterAgent / RegisterService: the aggregate must
// have no event, or its last event must be the deletion (an id can be
// registered again after it was deleted), and the tenant must be within
// its quota (QUOTA_EXCEEDED). An id left out of the data is the command's
// correlation id, so a redelivery registers the same id.
func (c ControlPlane) decideRegister(aggType, registered, deleted string, taken errs.Code) func(context.Context, Command, State) (Decision, error) {
	return func(ctx context.Context, cmd Command, s State) (Decision, error) {
		var in Registration
		if err := DecodeData(cmd.Envelope.Data, &in); err != nil {
			return Rejected(errs.CodeValidationFailed, "data is not a %s registration: %v", aggType, err), nil
		}
		if in.ID == "" {
			in.ID = cmd.CorrelationID
		}
		if !envelope.ValidTokenID(in.ID) {
			return Rejected(errs.CodeValidationFailed, "id must be "+IDRule), nil
		}
		if aggType == AggAgent {
			for _, t := range in.Accepts {
				if why := c.CannotAccept(t); why != "" {
					return Rejected(errs.CodeValidationFailed, "accepts: %s", why), nil
				}
			}
		}
		h, err := c.head(ctx, s, cmd, aggType, in.ID)
		switch {
		case err != nil:
			return Decision{}, err
		case h.mine:
			return Decision{}, nil // a redelivery of the command that wrote it
		case h.last != nil && h.typ != deleted:
			return Rejected(taken, "%s %q is already registered", aggType, in.ID), nil
		}
		if e := c.Quotas.Exceeded(cmd.Tenant, aggType); e != nil {
			return Decision{Reject: e}, nil
		}
		out := Registration{ID: in.ID, Name: in.Name, Description: in.Description,
			Accepts: nonNil(in.Accepts), Produces: nonNil(in.Produces), CreatedAt: c.stamp()}
		if aggType == AggAgent {
			out.Status = AgentActive
		}
		ev := NewEvent{Type: registered, AggType: aggType, AggID: in.ID, Data: MustJSON(out)}
		return Decision{Events: []NewEvent{ev}, Expect: &bus.Expect{LastSeq: h.seq()}}, nil
	}
}

// Processes reports whether agentbus processes command type t itself.
func (c ControlPlane) Processes(t string) bool { return c.ProcessedHere != nil && c.ProcessedHere(t) }

// CannotAccept says why an agent cannot accept command type t, or returns
// "" when it can: a type agentbus processes itself is not handed to agents.
func (c ControlPlane) CannotAccept(t string) string {
	if c.Processes(t) {
		return t + " is processed by agentbus itself (a built-in processor or a catalogue rule); an agent cannot take it over"
	}
	return ""
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
func (c ControlPlane) registered(ctx context.Context, s State, cmd Command, aggType, deleted string, notFound errs.Code) (id string, h aggregateHead, done *Decision, err error) {
	var in struct {
		ID string `json:"id"`
	}
	_ = DecodeData(cmd.Envelope.Data, &in)
	id = in.ID
	if !envelope.ValidTokenID(id) {
		d := Rejected(errs.CodeValidationFailed, "id must be "+IDRule)
		return id, h, &d, nil
	}
	h, err = c.head(ctx, s, cmd, aggType, id)
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

func deref(d *Decision) Decision {
	if d == nil {
		return Decision{}
	}
	return *d
}

// decideAgentChange decides PauseAgent, ResumeAgent and DeleteAgent from the
// agent's last event: none or AgentDeleted → AGENT_NOT_FOUND; pausing a
// paused agent → AGENT_ALREADY_PAUSED; resuming an agent that is not paused
// → AGENT_NOT_PAUSED. An agent whose consumer failed is paused or not as
// it was (PausedAt), and any change makes its consumer again.
func (c ControlPlane) decideAgentChange(cmdType string) func(context.Context, Command, State) (Decision, error) {
	return func(ctx context.Context, cmd Command, s State) (Decision, error) {
		id, h, done, err := c.registered(ctx, s, cmd, AggAgent, TypeAgentDeleted, errs.CodeAgentNotFound)
		if err != nil || done != nil {
			return deref(done), err
		}
		var typ string
		switch cmdType {
		case TypePauseAgent:
			if h.paused {
				return Rejected(errs.CodeAgentAlreadyPaused, "agent %q is already paused", id), nil
			}
			typ = TypeAgentPaused
		case TypeResumeAgent:
			if !h.paused {
				return Rejected(errs.CodeAgentNotPaused, "agent %q is not paused", id), nil
			}
			typ = TypeAgentResumed
		default:
			typ = TypeAgentDeleted
		}
		ev := NewEvent{Type: typ, AggType: AggAgent, AggID: id, Data: MustJSON(Change{ID: id, At: c.stamp()})}
		return Decision{Events: []NewEvent{ev}, Expect: &bus.Expect{LastSeq: h.seq()}}, nil
	}
}

// decideDeleteService decides DeleteService: ServiceDeleted.
func (c ControlPlane) decideDeleteService(ctx context.Context, cmd Command, s State) (Decision, error) {
	id, h, done, err := c.registered(ctx, s, cmd, AggService, TypeServiceDeleted, errs.CodeServiceNotFound)
	if err != nil || done != nil {
		return deref(done), err
	}
	ev := NewEvent{Type: TypeServiceDeleted, AggType: AggService, AggID: id, Data: MustJSON(Change{ID: id, At: c.stamp()})}
	return Decision{Events: []NewEvent{ev}, Expect: &bus.Expect{LastSeq: h.seq()}}, nil
}
