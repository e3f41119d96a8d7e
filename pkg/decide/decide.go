// Package decide is the decide contract of agentbus: a command, a
// decision, a decider, and the folds of the aggregates agentbus keeps
// itself (agents, services). It imports no runtime, no transport and no
// NATS: what a decider reads comes through State, and what it decides is
// appended by the processor runtime (pkg/execute).
package decide

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// Command is a queued command handed to a Decider.
type Command struct {
	Tenant        string
	CorrelationID string
	Type          string // from the subject
	Seq           uint64 // in the command log
	Envelope      *envelope.Envelope
	Entry         *catalog.Entry
	// Attempt counts decisions of this delivery: 0 first, more after a
	// concurrent append to the aggregate made the previous one stale.
	Attempt int
}

// NewEvent is an event a Decider wants appended. Data is its JSON object.
type NewEvent struct {
	Type    string
	AggType string // kebab-case; empty for no aggregate
	AggID   string
	Data    []byte
}

// Decision is a Decider's verdict: events to append (atomically, under
// Expect when set) or a rejection. The zero Decision appends nothing: the
// command is done (a redelivery of a command whose events are stored).
type Decision struct {
	Events []NewEvent
	// Expect, when set, makes the append conditional: the aggregate's last
	// event must still be the one the decision was based on.
	Expect *bus.Expect
	Reject *errs.Error
}

// Rejected returns a Decision rejecting the command with code and message.
func Rejected(code errs.Code, format string, args ...any) Decision {
	return Decision{Reject: errs.New(code, format, args...)}
}

// State reads what a Decider needs to decide.
type State interface {
	// LastEvent returns the last event of an aggregate, or errs.ErrNotFound.
	LastEvent(ctx context.Context, tenant, aggType, aggID string) (*bus.Message, error)
}

// Decider turns a command into a Decision. It must be deterministic given
// the state it reads: a redelivered command may be decided again. An error
// is transient (the command is retried); a rejection is a Decision.
type Decider interface {
	Decide(ctx context.Context, cmd Command, s State) (Decision, error)
}

// DeciderFunc adapts a function to Decider.
type DeciderFunc func(ctx context.Context, cmd Command, s State) (Decision, error)

// Decide implements Decider.
func (f DeciderFunc) Decide(ctx context.Context, cmd Command, s State) (Decision, error) {
	return f(ctx, cmd, s)
}

// TypeCommandRejected is the event every rejected command yields.
const TypeCommandRejected = "CommandRejected"

// IDRule is what envelope.ValidTokenID accepts, as messages state it.
const IDRule = "1-128 characters [A-Za-z0-9_-]"

// RuleDecider runs a catalogue rule (Entry.Rule): the command's data
// becomes one event, on an aggregate when the rule names one.
type RuleDecider struct{}

// Decide implements Decider.
func (RuleDecider) Decide(ctx context.Context, cmd Command, s State) (Decision, error) {
	r := cmd.Entry.Rule
	ev := NewEvent{Type: r.Emits, Data: cmd.Envelope.Data}
	agg := r.Aggregate
	if agg == nil {
		return Decision{Events: []NewEvent{ev}}, nil
	}
	// The id is read from data's top-level members without decoding the
	// rest. A key given twice is read as encoding/json would: the last
	// one wins.
	_, _, fields, err := envelope.SplitObject(cmd.Envelope.Data)
	if err != nil {
		return Rejected(errs.CodeValidationFailed, "data is not a JSON object"), nil
	}
	var id string
	if err := json.Unmarshal(fields[agg.IDField], &id); err != nil || !envelope.ValidTokenID(id) {
		return Rejected(errs.CodeValidationFailed, "data.%s must be an id of "+IDRule, agg.IDField), nil
	}
	ev.AggType, ev.AggID = agg.Type, id
	return DecideOnAggregate(ctx, cmd, s, agg.Expect, ev)
}

// DecideOnAggregate appends ev to its aggregate under an optimistic
// expectation: new (must have no events; else AGGREGATE_ALREADY_EXISTS),
// exists (must have events; else AGGREGATE_NOT_FOUND) or any.
func DecideOnAggregate(ctx context.Context, cmd Command, s State, expect string, ev NewEvent) (Decision, error) {
	if expect == catalog.ExpectNew && cmd.Attempt == 0 {
		// Optimistic: most new aggregates are new. The append is
		// conditional on no event existing; a conflict decides again, with
		// a read (a redelivery that wrote it is recognised before that).
		return Decision{Events: []NewEvent{ev}, Expect: &bus.Expect{LastSeq: 0}}, nil
	}
	last, err := s.LastEvent(ctx, cmd.Tenant, ev.AggType, ev.AggID)
	var seq uint64
	switch {
	case errors.Is(err, errs.ErrNotFound):
		if expect == catalog.ExpectExists {
			return Rejected(errs.CodeAggregateNotFound, "%s %q does not exist", ev.AggType, ev.AggID), nil
		}
	case err != nil:
		return Decision{}, err
	case last.Header.Get(bus.HeaderCorrelationID) == cmd.CorrelationID:
		return Decision{}, nil // a redelivery of the command that wrote it: done
	default:
		if expect == catalog.ExpectNew {
			return Rejected(errs.CodeAggregateExists, "%s %q already exists", ev.AggType, ev.AggID), nil
		}
		seq = last.Seq
	}
	return Decision{Events: []NewEvent{ev}, Expect: &bus.Expect{LastSeq: seq}}, nil
}

// MustJSON marshals v, which must be marshallable (a panic otherwise).
func MustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
