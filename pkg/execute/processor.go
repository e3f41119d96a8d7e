// Package execute is agentbus's processor runtime: consume a command,
// decide it (pkg/decide), append the events it yields, settle the delivery
// (pkg/settle). agentbus runs it for the command types it processes
// itself, and pkg/processor runs the same code in other Go programs.
package execute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/settle"
	"github.com/agentbus/agentbus/pkg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Config holds the runtime's settings. Zero values take the defaults noted.
type Config struct {
	Prefix string // subject prefix; default "agentbus"
	// Source is the envelope source of the events written; default
	// "agentbus".
	Source string
	// Schemas builds event dataschema URIs (Base default
	// "http://127.0.0.1:8080").
	Schemas catalog.URLs
	// DuplicateWindow is the command stream's (streams.duplicateWindow;
	// default 30s). A copy of a command can be stored only once its first
	// message is older than this, so a command handed over in memory is
	// checked against its receipt only when it waited that long.
	DuplicateWindow time.Duration
	// MaxAttempts is how often a command is tried before it is rejected
	// with INTERNAL_ERROR (default 10; keep it below the processor
	// consumer's max_deliver).
	MaxAttempts int
	// Quotas bound the registrations the control plane decides (none by
	// default).
	Quotas decide.Quotas
}

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = "agentbus"
	}
	if c.Source == "" {
		c.Source = "agentbus"
	}
	if c.Schemas.Base == "" {
		c.Schemas.Base = "http://127.0.0.1:8080"
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = 30 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
}

// Ports are what the runtime reads and writes.
type Ports struct {
	Commands bus.Log // read to reject commands agents never acknowledged
	Events   bus.Log
	// Receipts tell whether a command's events are stored already (a
	// redelivery after a crash, a copy of a command decided meanwhile).
	Receipts *projection.Receipts
	// Consumers are the command log's (checked before rejecting an
	// undelivered command).
	Consumers bus.ConsumerAdmin
	// Aggregates find the last event of an aggregate of a sharded type
	// (every type but agentbus's registrations: bus.IDInSubject).
	Aggregates AggregateIndex
	// Subscriptions, when set, are what the subscription commands are
	// decided with: the control plane then decides them too.
	Subscriptions *decide.SubscriptionPorts
	// Observer, when set, is told of each delivery processed.
	Observer Observer
}

// Outcomes of a delivery processed, as Observer.Processed hears them.
const (
	OutcomeDone     = "done"     // its events are stored
	OutcomeRejected = "rejected" // its CommandRejected event is stored
	OutcomeFailed   = "failed"   // it failed, and is retried or settled by the policy
)

// Observer hears what processing does (metrics). Its methods are called
// from the processor's workers and must not block.
type Observer interface {
	// Processed is called once for each delivery of a command that
	// stored its outcome (done, rejected; waited: from the command's
	// storing to its events'), or failed (waited 0). A redelivery of a
	// command whose events are stored already is not reported.
	Processed(outcome string, waited time.Duration)
	// Conflicted is called each time an append of a command's events is
	// refused because its aggregate, or the aggregate's shard, moved on
	// since the decision (another writer appended to it), as it is
	// refused: the command is then decided again.
	Conflicted()
}

// Processor decides commands and appends their events. Deciders are added
// with Handle before processing starts; then it is safe for concurrent
// use.
type Processor struct {
	cfg      Config
	cat      *catalog.Catalog
	p        Ports
	subj     bus.Subjects
	log      *slog.Logger
	deciders map[string]decide.Decider
	now      func() time.Time
	handoff  *Handoff // nil unless EnableHandoff
	decided  decidedSet
	shards   shardCache
	// ruleAggregates are the rules' aggregates by command type (OrderKey).
	ruleAggregates map[string]catalog.AggregateRule
}

// New returns a Processor with a decider for every catalogue rule. The
// types it processes are those of cat as New finds it (a catalogue reload
// changes no rule: pkg/server refuses it).
func New(cfg Config, cat *catalog.Catalog, p Ports, log *slog.Logger) *Processor {
	cfg.defaults()
	r := &Processor{cfg: cfg, cat: cat, p: p, subj: bus.Subjects{Prefix: cfg.Prefix}, log: log,
		deciders: map[string]decide.Decider{}, now: time.Now,
		decided: decidedSet{ids: newRecent[struct{}](maxDecided, 0)}, shards: newShardCache(),
		ruleAggregates: ruleAggregatesOf(cat)}
	for _, e := range cat.Commands() {
		if e.Rule != nil {
			r.deciders[e.Type] = decide.RuleDecider{}
		}
	}
	return r
}

// Subjects returns the subject builder.
func (r *Processor) Subjects() bus.Subjects { return r.subj }

// Handle registers d as the processor of command type typ, replacing any
// catalogue rule.
func (r *Processor) Handle(typ string, d decide.Decider) { r.deciders[typ] = d }

// Handles reports whether typ has a decider here.
func (r *Processor) Handles(typ string) bool {
	_, ok := r.deciders[typ]
	return ok
}

// ControlPlane is the control plane as this processor decides it: an
// agent cannot accept the types it handles, and registrations are bounded
// by Config.Quotas.
func (r *Processor) ControlPlane() decide.ControlPlane {
	return decide.ControlPlane{Subjects: r.subj, Now: r.now, ProcessedHere: r.Handles, Quotas: r.cfg.Quotas, Subscriptions: r.p.Subscriptions}
}

// HandleControlPlane registers the control plane's deciders (agentbus's
// built-in processor): agents, services and, with Ports.Subscriptions set,
// subscriptions.
func (r *Processor) HandleControlPlane() {
	for typ, d := range r.ControlPlane().Deciders() {
		r.Handle(typ, d)
	}
}

// ProcessedTypes lists the command types this processor handles.
func (r *Processor) ProcessedTypes() []string {
	out := make([]string, 0, len(r.deciders))
	for t := range r.deciders {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// UnprocessedTypes lists the catalogue's command types no decider here
// handles: they wait on the command stream for agents and external
// processors.
func (r *Processor) UnprocessedTypes() []string { return r.UnprocessedIn(r.cat.Current()) }

// UnprocessedIn lists the command types of cat no decider here handles.
func (r *Processor) UnprocessedIn(cat *catalog.Snapshot) []string {
	var out []string
	for _, e := range cat.Commands() {
		if !r.Handles(e.Type) && !slices.Contains(out, e.Type) {
			out = append(out, e.Type)
		}
	}
	sort.Strings(out)
	return out
}

// EnableHandoff makes the commands queued through the returned handoff
// (by ingest in this process) reach this processor in memory. Call it
// before processing starts.
func (r *Processor) EnableHandoff() *Handoff {
	r.handoff = NewHandoff()
	return r.handoff
}

// LastEvent implements decide.State on the event log and, for a sharded
// aggregate type, the aggregate index.
func (r *Processor) LastEvent(ctx context.Context, tenant, aggType, aggID string) (*bus.Message, error) {
	if sharded(aggType) {
		return r.lastOfSharded(ctx, tenant, aggType, aggID)
	}
	return r.p.Events.Last(ctx, r.subj.Aggregate(tenant, aggType, aggID))
}

// maxConflictRetries bounds re-deciding after a concurrent append.
const maxConflictRetries = 5

// Handler is the processor consumer's handler: decide, append the events
// atomically, then ack. A redelivered command reproduces the same event
// ids, so it never duplicates its events; a command that cannot be
// processed yields a CommandRejected event, and so does one still failing
// after MaxAttempts deliveries. Transient failures nak with backoff.
func (r *Processor) Handler() bus.Handler {
	return settle.Wrap(settle.Policy{
		What: "process command", Log: r.log,
		Backoff:  settle.Linear(time.Second, 30*time.Second),
		Attempts: uint64(r.cfg.MaxAttempts),
		Exhausted: func(ctx context.Context, m *bus.Message, n uint64, _ error) error {
			return r.rejectStored(ctx, m, errs.New(errs.CodeInternal, "processing failed after %d attempts", n))
		},
	}, func(ctx context.Context, m *bus.Message, n uint64) error {
		ctx, span := tracing.Start(tracing.Extract(ctx, m.Header), "process command", trace.SpanKindConsumer,
			attribute.String("agentbus.command.type", commandType(r.subj, m)), attribute.Int64("agentbus.delivery", int64(n)))
		defer span.End()
		if r.p.Observer == nil {
			err := r.process(ctx, m, n == 1)
			tracing.Fail(span, err)
			return err
		}
		var st stored
		err := r.process(context.WithValue(ctx, storedKey{}, &st), m, n == 1)
		tracing.Fail(span, err)
		switch {
		case err != nil:
			r.p.Observer.Processed(OutcomeFailed, 0)
		case st.outcome != "":
			r.p.Observer.Processed(st.outcome, st.at.Sub(m.Time))
		}
		return err
	})
}

// commandType is the command type m's subject names, or "".
func commandType(s bus.Subjects, m *bus.Message) string {
	_, typ, _ := s.ParseCommand(m.Subject)
	return typ
}

// stored is what a delivery stored, for the Observer: its outcome and
// when ("" when nothing).
type stored struct {
	outcome string
	at      time.Time
}

type storedKey struct{}

// rejectStored rejects a stored command message without deciding it.
func (r *Processor) rejectStored(ctx context.Context, m *bus.Message, why *errs.Error) error {
	cmd, ok := decide.StoredHead(r.subj, m)
	if !ok {
		return errors.New("not a command subject")
	}
	_ = decide.ReadEnvelope(&cmd, m.Data) // invalid or not, the rejection is the same
	return r.reject(ctx, cmd, why)
}

// process decides a command and appends its events; first says this is
// the message's first delivery.
func (r *Processor) process(ctx context.Context, m *bus.Message, first bool) error {
	cmd, ok := decide.StoredHead(r.subj, m)
	if !ok {
		r.log.ErrorContext(ctx, "command on an unexpected subject dropped", "subject", m.Subject)
		return nil
	}
	if h, ok := r.handoff.takeFirst(ctx, first, cmd.CorrelationID, m.Seq, m.Data); ok && h.env.Type == cmd.Type {
		// Queued by this process, checked and new when it was stored:
		// decide. Unless a copy was decided here since, or processing
		// stalled past the duplicate window (a copy stored since may
		// have been decided elsewhere): then look at its receipt first.
		// A mere backlog is younger than the window and costs nothing.
		cmd.Envelope, cmd.Entry = h.env, h.entry
		if r.decided.has(cmd.CorrelationID) || time.Since(h.at) > r.cfg.DuplicateWindow && r.processedBefore(ctx, cmd.Tenant, cmd.CorrelationID, true) {
			return nil
		}
		return r.decide(ctx, cmd, true)
	}
	invalid := decide.ReadEnvelope(&cmd, m.Data)
	// A redelivery may follow a delivery whose events were stored just
	// before a crash: its receipt is read once they are projected.
	if cmd.CorrelationID != "" && r.processedBefore(ctx, cmd.Tenant, cmd.CorrelationID, !first) {
		// A redelivery or a republished copy — broken or not — of a
		// command whose events are stored: deciding again on today's
		// state, or rejecting the copy, could contradict them.
		return nil
	}
	if invalid != nil {
		return r.reject(ctx, cmd, errs.As(invalid))
	}
	if h := m.Header.Get(bus.HeaderCorrelationID); h != "" && h != cmd.CorrelationID {
		return r.reject(ctx, cmd, errs.New(errs.CodeValidationFailed,
			"header %s is %.140q, not this command's correlation id %s (derived from its tenant, source and id)", bus.HeaderCorrelationID, h, cmd.CorrelationID))
	}
	if cmd.Envelope.Type != cmd.Type {
		return r.reject(ctx, cmd, errs.New(errs.CodeValidationFailed, "envelope type %q does not match subject type %q", cmd.Envelope.Type, cmd.Type))
	}
	entry, err := r.cat.ResolveCommand(cmd.Envelope)
	if err != nil {
		return r.reject(ctx, cmd, errs.As(err))
	}
	cmd.Entry = entry
	return r.decide(ctx, cmd, false)
}

// decide runs the command's decider and appends what it decides, deciding
// again after a concurrent append to the aggregate. handed says the
// command came through the handoff, so its receipt was not read before.
func (r *Processor) decide(ctx context.Context, cmd decide.Command, handed bool) error {
	dec, ok := r.deciders[cmd.Type]
	if !ok {
		return r.reject(ctx, cmd, errs.New(errs.CodeCapabilityNotSupported, "no processor handles %s", cmd.Type))
	}
	if _, byRule := dec.(decide.RuleDecider); byRule && cmd.Entry.Rule == nil {
		return r.reject(ctx, cmd, errs.New(errs.CodeCapabilityNotSupported,
			"%s %s has no processing rule; agentbus processes %s by the rules of its other versions", cmd.Type, cmd.Entry.Version, cmd.Type))
	}
	for attempt := 0; ; attempt++ {
		cmd.Attempt = attempt
		d, err := dec.Decide(ctx, cmd, r)
		if err != nil {
			return fmt.Errorf("decide: %w", err)
		}
		if d.Reject != nil {
			if (handed || attempt > 0) && r.processedBefore(ctx, cmd.Tenant, cmd.CorrelationID, false) {
				// A copy of this command was processed meanwhile (stored
				// twice while processing stalled past the duplicate window):
				// its events stand, and a rejection would contradict them.
				return nil
			}
			return r.reject(ctx, cmd, d.Reject)
		}
		// On a conflict someone else appended to the aggregate since the
		// decision: decide again on the new state.
		err = r.appendEvents(ctx, cmd, d)
		if errors.Is(err, errs.ErrTooLarge) {
			return r.reject(ctx, cmd, errs.New(errs.CodePayloadTooLarge, "the events it yields are larger than the event store takes"))
		}
		if !errors.Is(err, errs.ErrConflict) || attempt >= maxConflictRetries {
			return err
		}
	}
}

// processedBefore reports whether this process stored the outcome of corr
// lately (the decided set), or its receipt already lists events.
// Receipts are the history on this replica's disk, which follows the event
// log and can be behind (right after a restart, say). With settle, for a
// command whose events may have been stored moments ago (a redelivery
// after a crash, a copy decided meanwhile), it first waits for the
// history to hold the event log's end (projection.Receipts.Current): past the duplicate window nothing else stops
// those events being written twice. The wait is for those rare paths only.
// On a failed lookup it says no: deterministic event ids still deduplicate
// within the duplicate window.
func (r *Processor) processedBefore(ctx context.Context, tenant, corr string, settle bool) bool {
	if r.decided.has(corr) {
		return true // stored by this process lately; its receipt may lag
	}
	if settle {
		if err := r.p.Receipts.Current(ctx); err != nil {
			r.log.WarnContext(ctx, "deciding on a receipt that may lag the event log", "correlationId", corr, "err", err)
		}
	}
	processed, err := r.p.Receipts.Processed(tenant, corr)
	return err == nil && processed
}

func (r *Processor) wroteLast(ctx context.Context, filter, corr string) bool {
	last, err := r.p.Events.Last(ctx, filter)
	return err == nil && last.Header.Get(bus.HeaderCorrelationID) == corr
}

// reject appends the CommandRejected event of cmd.
func (r *Processor) reject(ctx context.Context, cmd decide.Command, why *errs.Error) error {
	if cmd.CorrelationID == "" {
		r.log.ErrorContext(ctx, "unidentifiable command dropped", "type", cmd.Type, "err", why)
		return nil
	}
	data := decide.MustJSON(map[string]any{
		"commandId": cmd.CorrelationID, "commandType": cmd.Type, "code": why.Code, "message": rejectionMessage(why),
	})
	d := decide.Decision{Events: []decide.NewEvent{{Type: decide.TypeCommandRejected, Data: data}}}
	return r.appendEvents(ctx, cmd, d)
}

// rejectionMessage is why's message with its violations, as many as fit
// in project.MaxRejectionMessage (a rejection has no details of its own).
func rejectionMessage(why *errs.Error) string {
	msg := why.Message
	for i, v := range why.Violations {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		next := sep + v.Path + " " + v.Message
		if len(msg)+len(next) > projection.MaxRejectionMessage-32 { // room for the count
			return msg + fmt.Sprintf(" (and %d more)", len(why.Violations)-i)
		}
		msg += next
	}
	return msg
}

// newEvent builds the envelope of an event the processor publishes.
func (r *Processor) newEvent(tenant, id, typ string, data []byte) *envelope.Envelope {
	env := &envelope.Envelope{
		SpecVersion: envelope.SpecVersion, ID: id, Source: r.cfg.Source, Type: typ,
		DataContentType: envelope.ContentType, Time: decide.Stamp(r.now()), Data: data,
	}
	if e, ok := r.cat.LatestEvent(typ); ok && e.Typed() {
		env.DataSchema = r.cfg.Schemas.Schema(tenant, catalog.KindEvent, e)
	}
	return env
}

// WriteEvent implements reconcile.EventWriter (asserted in pkg/server):
// it appends ev for tenant as an event of the command corr ("": of none),
// with the id envelope.EventID(key, 0, ev.Type), provided the last event
// of ev's aggregate is at sequence after. Writing the same key again
// changes nothing; errs.ErrConflict when the aggregate moved on.
func (r *Processor) WriteEvent(ctx context.Context, tenant, corr, key string, ev decide.NewEvent, after uint64) error {
	if sharded(ev.AggType) {
		return fmt.Errorf("WriteEvent writes the events of agentbus's registrations, not of %s", ev.AggType)
	}
	id := envelope.EventID(key, 0, ev.Type)
	env := r.newEvent(tenant, id, ev.Type, ev.Data)
	h := bus.Header{bus.HeaderMsgID: {id}}
	if corr != "" {
		h.Set(bus.HeaderCorrelationID, corr)
	}
	if env.DataSchema != "" {
		h.Set(bus.HeaderSchema, env.DataSchema)
	}
	if ev.AggType != "" {
		h.Set(bus.HeaderAggregateID, ev.AggID)
	}
	agg := r.subj.Aggregate(tenant, ev.AggType, ev.AggID)
	m := &bus.Message{Subject: r.subj.Event(bus.RootEvents, tenant, ev.AggType, ev.AggID, ev.Type), Header: h, Data: env.Marshal()}
	_, err := r.p.Events.Append(ctx, []*bus.Message{m}, &bus.Expect{Subject: agg, LastSeq: after})
	switch {
	case errors.Is(err, errs.ErrDuplicate):
		return nil
	case errors.Is(err, errs.ErrConflict):
		// A standalone server answers a retried append with "wrong last
		// sequence".
		if last, lerr := r.p.Events.Last(ctx, agg); lerr == nil && last.Header.Get(bus.HeaderMsgID) == id {
			return nil
		}
	}
	return err
}

func (r *Processor) appendEvents(ctx context.Context, cmd decide.Command, d decide.Decision) error {
	if len(d.Events) == 0 {
		return nil
	}
	for _, ev := range d.Events {
		if sharded(ev.AggType) && !envelope.ValidTokenID(ev.AggID) {
			// A decider's mistake: the event would belong to no aggregate.
			return r.reject(ctx, cmd, errs.New(errs.CodeInternal, "its processor decided an event of %s %.140q, which is not an id of "+decide.IDRule, ev.AggType, ev.AggID))
		}
	}
	msgs := make([]*bus.Message, len(d.Events))
	causation := ""
	if cmd.Envelope != nil {
		causation = cmd.Envelope.ID
	}
	for i, ev := range d.Events {
		id := envelope.EventID(cmd.CorrelationID, i, ev.Type)
		env := r.newEvent(cmd.Tenant, id, ev.Type, ev.Data)
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
		if ev.AggType != "" {
			h.Set(bus.HeaderAggregateID, ev.AggID)
		}
		msgs[i] = &bus.Message{Subject: r.subj.Event(bus.RootEvents, cmd.Tenant, ev.AggType, ev.AggID, ev.Type), Header: h, Data: env.Marshal()}
	}
	ctx, span := tracing.Start(ctx, "append events", trace.SpanKindProducer, attribute.Int("agentbus.events", len(msgs)))
	defer span.End()
	for _, m := range msgs {
		tracing.Inject(ctx, m.Header)
	}
	var expect *bus.Expect
	first := d.Events[0]
	switch {
	case d.Expect == nil:
	case sharded(first.AggType):
		var err error
		if expect, err = r.shardExpect(ctx, cmd.Tenant, first, d.Expect.LastSeq); err != nil {
			tracing.Fail(span, err)
			return err
		}
	default:
		expect = &bus.Expect{Subject: r.subj.Aggregate(cmd.Tenant, first.AggType, first.AggID), LastSeq: d.Expect.LastSeq}
	}
	last, err := r.p.Events.Append(ctx, msgs, expect)
	if errors.Is(err, errs.ErrConflict) && r.p.Observer != nil {
		r.p.Observer.Conflicted()
	}
	switch {
	case err == nil:
		r.appended(cmd.Tenant, d.Events, msgs, last, expect)
	case errors.Is(err, errs.ErrDuplicate):
		err = nil // a redelivery: these events are stored already
	case errors.Is(err, errs.ErrConflict) && expect != nil && sharded(first.AggType):
		r.conflicted(expect)
		if m, lerr := r.LastEvent(ctx, cmd.Tenant, first.AggType, first.AggID); lerr == nil && m.Header.Get(bus.HeaderCorrelationID) == cmd.CorrelationID {
			err = nil // a standalone server answers a retried append with "wrong last sequence"
		}
	case errors.Is(err, errs.ErrConflict) && expect != nil && r.wroteLast(ctx, expect.Subject, cmd.CorrelationID):
		err = nil // a standalone server answers a retried append with "wrong last sequence"
	}
	tracing.Fail(span, err)
	if err == nil {
		r.decided.add(cmd.CorrelationID)
		if st, ok := ctx.Value(storedKey{}).(*stored); ok {
			st.outcome, st.at = OutcomeDone, time.Now()
			if d.Events[0].Type == decide.TypeCommandRejected {
				st.outcome = OutcomeRejected
			}
		}
	}
	return err
}

// decidedSet remembers the commands whose outcome this process stored
// lately (two generations of at most maxDecided), for processedBefore:
// their receipts may not show it yet. It only saves reads: without it, a
// command would be found processed by its receipt once projected, and
// deterministic event ids deduplicate before that. By correlation id
// alone: it is derived from the tenant too.
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
