package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

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
	// handed says the command came through the handoff, so its receipt
	// was not read before deciding.
	handed bool
}

// NewEvent is an event a Decider wants appended. Data is its JSON object.
type NewEvent struct {
	Type    string
	AggType string // kebab-case; empty for no aggregate
	AggID   string
	Data    []byte
}

// Decision is a Decider's verdict: events to append (atomically, under
// Expect when set) or a rejection.
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

// ruleDecider runs a catalogue rule: the command's data becomes one event.
type ruleDecider struct{}

func (ruleDecider) Decide(ctx context.Context, cmd Command, s State) (Decision, error) {
	r := cmd.Entry.Rule
	ev := NewEvent{Type: r.Emits, Data: cmd.Envelope.Data}
	agg := r.Aggregate
	if agg == nil {
		return Decision{Events: []NewEvent{ev}}, nil
	}
	// The id is read from data's top-level members without decoding the
	// rest (json.Unmarshal into a map cost ~1 % of the CPU per command). A
	// key given twice is read as encoding/json would: the last one wins.
	_, _, fields, err := envelope.SplitObject(cmd.Envelope.Data)
	if err != nil {
		return Rejected(errs.CodeValidationFailed, "data is not a JSON object"), nil
	}
	var id string
	if err := json.Unmarshal(fields[agg.IDField], &id); err != nil || !envelope.ValidTokenID(id) {
		return Rejected(errs.CodeValidationFailed, "data.%s must be an id of "+idRule, agg.IDField), nil
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

// LastEvent implements State on the event log.
func (a *App) LastEvent(ctx context.Context, tenant, aggType, aggID string) (*bus.Message, error) {
	return a.p.Events.Last(ctx, a.subj.Aggregate(tenant, aggType, aggID))
}

// maxConflictRetries bounds re-deciding after a concurrent append.
const maxConflictRetries = 5

// ProcessCommand is the processor's handler: decide, append the events
// atomically, then ack. A redelivered command reproduces the same event ids,
// so it never duplicates its events; a command that cannot be processed
// yields a CommandRejected event. Transient failures nak with backoff.
func (a *App) ProcessCommand(ctx context.Context, d bus.Delivery) {
	m := d.Message()
	err := a.process(ctx, m, d.NumDelivered() == 1)
	log := func() *slog.Logger { // built only when there is something to say
		return a.log.With("correlationId", m.Header.Get(bus.HeaderCorrelationID), "subject", m.Subject)
	}
	if err == nil {
		if err := d.Ack(ctx); err != nil {
			log().Warn("ack failed; the command will be redelivered and deduplicated", "err", err)
		}
		return
	}
	if n := d.NumDelivered(); n >= uint64(a.cfg.MaxAttempts) {
		// Out of attempts: the command still gets a terminal outcome.
		log().Error("processing failed for good; rejecting the command", "err", err, "attempts", n)
		if rerr := a.rejectStored(ctx, m, errs.New(errs.CodeInternal, "processing failed after %d attempts", n)); rerr == nil {
			_ = d.Ack(ctx)
			return
		}
	}
	log().Warn("processing failed; will retry", "err", err, "delivery", d.NumDelivered())
	delay := min(time.Duration(d.NumDelivered())*time.Second, 30*time.Second)
	_ = d.Nak(delay)
}

// rejectStored rejects a stored command message without deciding it.
func (a *App) rejectStored(ctx context.Context, m *bus.Message, why *errs.Error) error {
	cmd, ok := a.commandHead(m)
	if !ok {
		return errors.New("not a command subject")
	}
	_ = readEnvelope(&cmd, m.Data) // invalid or not, the rejection is the same
	return a.reject(ctx, cmd, why)
}

// commandHead reads what the subject and headers of a stored command say:
// tenant, type, sequence and the correlation header (when valid), which
// only finds the command in this process's handoff: readEnvelope replaces
// it with the id the envelope derives. ok is false for a subject that is
// not a command's.
func (a *App) commandHead(m *bus.Message) (Command, bool) {
	tenant, typ, ok := a.subj.ParseCommand(m.Subject)
	if !ok {
		return Command{}, false
	}
	return Command{Tenant: tenant, CorrelationID: correlationOf(m), Type: typ, Seq: m.Seq}, true
}

// readEnvelope decodes a stored command's envelope into cmd and returns
// what makes it invalid. The command's correlation id is the one its
// tenant, source and id derive (as POST /commands derives it, and
// ProjectCommand for its receipt), even when the envelope is invalid, or ""
// when they cannot: never its Agentbus-Correlation-Id header, in which a
// publisher could name another command's — another tenant's — id and have
// this command's outcome land on it.
func readEnvelope(cmd *Command, raw []byte) error {
	env, err := envelope.Decode(raw, envelope.Command)
	if err == nil {
		cmd.Envelope = env
		cmd.CorrelationID = envelope.CorrelationID(cmd.Tenant, env.Source, env.ID)
	} else {
		cmd.CorrelationID = looseCorrelationID(cmd.Tenant, raw)
	}
	return err
}

// process decides a command and appends its events; first says this is
// the message's first delivery.
func (a *App) process(ctx context.Context, m *bus.Message, first bool) error {
	cmd, ok := a.commandHead(m)
	if !ok {
		a.log.Error("command on an unexpected subject dropped", "subject", m.Subject)
		return nil
	}
	if h, ok := a.handoff.takeFirst(ctx, first, cmd.CorrelationID, m.Seq, m.Data); ok && h.env.Type == cmd.Type {
		// Queued by this process, checked and new when it was stored:
		// decide. Unless a copy was decided here since, or processing
		// stalled past the duplicate window (a copy stored since may
		// have been decided elsewhere): then look at its receipt first.
		// A mere backlog is younger than the window and costs nothing.
		cmd.Envelope, cmd.Entry, cmd.handed = h.env, h.entry, true
		if a.decided.has(cmd.CorrelationID) || time.Since(h.at) > a.cfg.DuplicateWindow && a.processedBefore(ctx, cmd.Tenant, cmd.CorrelationID, true) {
			return nil
		}
		return a.decide(ctx, cmd)
	}
	invalid := readEnvelope(&cmd, m.Data)
	// A redelivery may follow a delivery whose events were stored just
	// before a crash: its receipt is read once they are projected.
	if cmd.CorrelationID != "" && a.processedBefore(ctx, cmd.Tenant, cmd.CorrelationID, !first) {
		// A redelivery or a republished copy — broken or not — of a
		// command whose events are stored: deciding again on today's
		// state, or rejecting the copy, could contradict them.
		return nil
	}
	if invalid != nil {
		return a.reject(ctx, cmd, errs.As(invalid))
	}
	if h := m.Header.Get(bus.HeaderCorrelationID); h != "" && h != cmd.CorrelationID {
		return a.reject(ctx, cmd, errs.New(errs.CodeValidationFailed,
			"header %s is %.140q, not this command's correlation id %s (derived from its tenant, source and id)", bus.HeaderCorrelationID, h, cmd.CorrelationID))
	}
	if cmd.Envelope.Type != cmd.Type {
		return a.reject(ctx, cmd, errs.New(errs.CodeValidationFailed, "envelope type %q does not match subject type %q", cmd.Envelope.Type, cmd.Type))
	}
	entry, err := a.cat.ResolveCommand(cmd.Envelope)
	if err != nil {
		return a.reject(ctx, cmd, errs.As(err))
	}
	cmd.Entry = entry
	return a.decide(ctx, cmd)
}

// decide runs the command's decider and appends what it decides, deciding
// again after a concurrent append to the aggregate.
func (a *App) decide(ctx context.Context, cmd Command) error {
	dec, ok := a.deciders[cmd.Type]
	if !ok {
		return a.reject(ctx, cmd, errs.New(errs.CodeCapabilityNotSupported, "no processor handles %s", cmd.Type))
	}
	for attempt := 0; ; attempt++ {
		cmd.Attempt = attempt
		d, err := dec.Decide(ctx, cmd, a)
		if err != nil {
			return fmt.Errorf("decide: %w", err)
		}
		if d.Reject != nil {
			if (cmd.handed || attempt > 0) && a.processedBefore(ctx, cmd.Tenant, cmd.CorrelationID, false) {
				// A copy of this command was processed meanwhile (stored
				// twice while processing stalled past the duplicate window):
				// its events stand, and a rejection would contradict them.
				return nil
			}
			return a.reject(ctx, cmd, d.Reject)
		}
		// On a conflict someone else appended to the aggregate since the
		// decision: decide again on the new state.
		err = a.appendEvents(ctx, cmd, d)
		if errors.Is(err, errs.ErrTooLarge) {
			return a.reject(ctx, cmd, errs.New(errs.CodePayloadTooLarge, "the events it yields are larger than the event store takes"))
		}
		if !errors.Is(err, errs.ErrConflict) || attempt >= maxConflictRetries {
			return err
		}
	}
}

// looseEnvelope is what can be read of a command envelope whatever else
// is wrong with it.
type looseEnvelope struct{ ID, Source, Type, Time string }

func readLoose(raw []byte) looseEnvelope {
	var e looseEnvelope
	_ = json.Unmarshal(raw, &e)
	return e
}

// correlationID derives the command's correlation id from its id and
// source when both are non-empty strings within the envelope's length
// limits, or returns "".
func (e looseEnvelope) correlationID(tenant string) string {
	if e.ID == "" || e.Source == "" || len(e.ID) > envelope.MaxIDLen || len(e.Source) > envelope.MaxSourceLen {
		return ""
	}
	return envelope.CorrelationID(tenant, e.Source, e.ID)
}

// storedCommand reads m, a message of the command log, as the command corr
// of tenant: false unless it is on that tenant's subject and its envelope
// derives corr (a header or another message may name any sequence).
func (a *App) storedCommand(m *bus.Message, tenant, corr string) (looseEnvelope, bool) {
	env := readLoose(m.Data)
	t, _, ok := a.subj.ParseCommand(m.Subject)
	return env, ok && t == tenant && env.correlationID(tenant) == corr
}

// looseCorrelationID derives the correlation id of a command whatever else
// is wrong with its envelope (the rule ProjectCommand applies), or "".
func looseCorrelationID(tenant string, raw []byte) string {
	return readLoose(raw).correlationID(tenant)
}

// processedBefore reports whether this process stored the outcome of corr
// lately, or its receipt already lists events.
// Receipts are projected from the event log by their own consumer, which
// can be behind (right after a restart, say). With settle, for a command
// whose events may have been stored moments ago (a redelivery after a
// crash, a copy decided meanwhile), and Ports.EventConsumers, it first
// waits, up to receiptsWait, until that consumer has projected every event
// stored when it looked: past the duplicate window nothing else stops those
// events being written twice. The wait is for those rare paths only; it
// costs two requests and up to the projection's lag. Without a receipt
// store (a standalone processor, pkg/processor) or on a failed lookup it
// says no: deterministic event ids still deduplicate.
func (a *App) processedBefore(ctx context.Context, tenant, corr string, settle bool) bool {
	if a.decided.has(corr) {
		return true // stored by this process lately; its receipt may lag
	}
	if a.p.Receipts == nil {
		return false
	}
	if settle {
		if err := a.receiptsCurrent(ctx); err != nil {
			a.log.Warn("deciding on a receipt that may lag the event log", "correlationId", corr, "err", err)
		}
	}
	r, err := a.Receipt(ctx, tenant, corr)
	return err == nil && len(r.Events) > 0
}

// receiptsWait bounds how long processedBefore waits for the receipts
// consumer, well inside the processor consumer's ack wait (10 s), so the
// wait itself never causes a redelivery; receiptsPoll is how often it
// looks.
const (
	receiptsWait = 3 * time.Second
	receiptsPoll = 20 * time.Millisecond
	// receiptsRetry: after a wait ran out, the next this long do not wait.
	receiptsRetry = 10 * time.Second
)

// receiptsCurrent waits until the receipts consumer has acknowledged every
// event up to the event log's last sequence as it is now.
func (a *App) receiptsCurrent(ctx context.Context) error {
	if a.p.EventConsumers == nil {
		return nil
	}
	if until := a.receiptsStuck.Load(); until != 0 && time.Now().UnixNano() < until {
		// A wait ran out lately: the projection is stuck (an event it
		// keeps failing on) or far behind. One waiter in receiptsRetry
		// pays for finding out, not every redelivery.
		return errors.New("the receipts consumer was behind at the last look")
	}
	last, err := a.p.Events.LastSeq(ctx)
	if err != nil {
		return err
	}
	if a.receiptsUpTo.Load() >= last {
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, receiptsWait)
	defer cancel()
	for {
		st, err := a.p.EventConsumers.Consumer(wait, ReceiptsConsumer)
		if err == nil && st.AckFloor >= last {
			for seen := a.receiptsUpTo.Load(); st.AckFloor > seen && !a.receiptsUpTo.CompareAndSwap(seen, st.AckFloor); seen = a.receiptsUpTo.Load() {
			}
			return nil
		}
		select {
		case <-wait.Done():
			a.receiptsStuck.Store(time.Now().Add(receiptsRetry).UnixNano())
			if err == nil {
				err = fmt.Errorf("receipts projected up to event %d of %d", st.AckFloor, last)
			}
			return err
		case <-time.After(receiptsPoll):
		}
	}
}

func (a *App) wroteLast(ctx context.Context, filter, corr string) bool {
	last, err := a.p.Events.Last(ctx, filter)
	return err == nil && last.Header.Get(bus.HeaderCorrelationID) == corr
}

// reject appends the CommandRejected event of cmd.
func (a *App) reject(ctx context.Context, cmd Command, why *errs.Error) error {
	if cmd.CorrelationID == "" {
		a.log.Error("unidentifiable command dropped", "type", cmd.Type, "err", why)
		return nil
	}
	data := mustJSON(map[string]any{
		"commandId": cmd.CorrelationID, "commandType": cmd.Type, "code": why.Code, "message": rejectionMessage(why),
	})
	d := Decision{Events: []NewEvent{{Type: TypeCommandRejected, Data: data}}}
	return a.appendEvents(ctx, cmd, d)
}

// rejectionMessage is why's message with its violations, as many as fit
// in maxRejectionMessage (a rejection has no details of its own).
func rejectionMessage(why *errs.Error) string {
	msg := why.Message
	for i, v := range why.Violations {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		next := sep + v.Path + " " + v.Message
		if len(msg)+len(next) > maxRejectionMessage-32 { // room for the count
			return msg + fmt.Sprintf(" (and %d more)", len(why.Violations)-i)
		}
		msg += next
	}
	return msg
}

// TypeCommandRejected is the event every rejected command yields.
const TypeCommandRejected = "CommandRejected"

func (a *App) appendEvents(ctx context.Context, cmd Command, d Decision) error {
	if len(d.Events) == 0 {
		return nil
	}
	msgs := make([]*bus.Message, len(d.Events))
	causation := ""
	if cmd.Envelope != nil {
		causation = cmd.Envelope.ID
	}
	for i, ev := range d.Events {
		id := envelope.EventID(cmd.CorrelationID, i, ev.Type)
		env := a.newEvent(cmd.Tenant, id, ev.Type, ev.Data)
		h := bus.Header{
			bus.HeaderMsgID:         {id},
			bus.HeaderCorrelationID: {cmd.CorrelationID},
		}
		if cmd.Seq > 0 {
			h.Set(bus.HeaderCommandSeq, strconv.FormatUint(cmd.Seq, 10))
		}
		if cmd.Type != "" {
			h.Set(bus.HeaderCommandType, cmd.Type)
		}
		if causation != "" {
			h.Set(bus.HeaderCausationID, causation)
		}
		if env.DataSchema != "" {
			h.Set(bus.HeaderSchema, env.DataSchema)
		}
		msgs[i] = &bus.Message{Subject: a.subj.Event(RootEvents, cmd.Tenant, ev.AggType, ev.AggID, ev.Type), Header: h, Data: env.Marshal()}
	}
	var expect *bus.Expect
	if d.Expect != nil {
		expect = &bus.Expect{Subject: a.subj.Aggregate(cmd.Tenant, d.Events[0].AggType, d.Events[0].AggID), LastSeq: d.Expect.LastSeq}
	}
	_, err := a.p.Events.Append(ctx, msgs, expect)
	switch {
	case errors.Is(err, errs.ErrDuplicate):
		err = nil // a redelivery: these events are stored already
	case errors.Is(err, errs.ErrConflict) && expect != nil && a.wroteLast(ctx, expect.Subject, cmd.CorrelationID):
		err = nil // a standalone server answers a retried append with "wrong last sequence"
	}
	if err == nil {
		a.decided.add(cmd.CorrelationID)
	}
	return err
}

// decidedSet remembers the commands whose outcome this process stored
// lately (two generations of at most maxDecided), for processedBefore: their
// receipts may not show it yet. By correlation id alone: it is derived
// from the tenant too.
type decidedSet struct {
	mu  sync.Mutex
	ids recent[struct{}]
}

const maxDecided = 8192

func (s *decidedSet) add(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids.put(key, struct{}{}, 0)
}

func (s *decidedSet) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids.has(key)
}
