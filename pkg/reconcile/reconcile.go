package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/projection"
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

// ErrConsumerFailed: the agent's consumer could not be made to match its
// state; the agent's record says why (status "failed").
var ErrConsumerFailed = errors.New("the agent's consumer could not be made")

// EventWriter appends the events agentbus writes on its own account, not
// as the decision on a command (process.Processor implements it).
type EventWriter interface {
	// WriteEvent appends ev for tenant as an event of the command corr
	// ("": of none), its id derived from key, provided the last event of
	// ev's aggregate is at sequence after: errs.ErrConflict when it moved
	// on. Writing the same key again changes nothing.
	WriteEvent(ctx context.Context, tenant, corr, key string, ev decide.NewEvent, after uint64) error
}

// AgentConsumers is the agent-consumer reconciler: for every agent event
// it makes the agent's durable consumer on the command log match the
// agent's latest state — created for a registered agent that accepts
// something, paused while the agent is paused, deleted with the agent. It
// reads the latest state rather than trusting the event, so projecting an
// event again, or an old one, is harmless.
//
// No agent holds up another: the control consumer's events are reconciled
// in parallel by agent (AgentKey), each tried once as it comes and acked;
// one that fails is tried again later by Run, off the consumer, with its
// own backoff (Retry). A consumer that cannot be made (the command stream
// has no room, or it still fails after Retry.Attempts) is recorded in the
// event log as AgentConsumerFailed, which the agent's record and its
// command's trace show. Safe for concurrent use.
type AgentConsumers struct {
	events    bus.Log
	consumers bus.ConsumerAdmin // of the command log
	receipts  *projection.Receipts
	pending   *projection.Pending
	agents    *projection.Registry[decide.Agent]
	writer    EventWriter
	subj      bus.Subjects
	log       *slog.Logger
	now       func() time.Time
	retry     Retry

	mu      sync.Mutex
	waiting map[agentRef]*retryState // agents to reconcile again
	running int                      // retries under way
	wake    chan struct{}
}

// Retry is how AgentConsumers tries again a reconciliation that failed for
// a reason that may pass (something not projected yet, a refusal of NATS
// other than a limit): Backoff(n) after the n-th failed try, at most
// Attempts tries in all (the first, as the event came, included), Workers
// at once.
type Retry struct {
	Attempts int
	Backoff  func(n uint64) time.Duration
	Workers  int
}

// DefaultRetry tries an agent 12 times over about 20 seconds, 4 agents at
// once.
var DefaultRetry = Retry{Attempts: 12, Backoff: settle.Linear(250*time.Millisecond, 5*time.Second), Workers: 4}

// NewAgentConsumers returns the reconciler of the agents' consumers
// (consumers: the command log's) from the event log; it records failures
// with writer and retries as DefaultRetry says.
func NewAgentConsumers(events bus.Log, consumers bus.ConsumerAdmin, receipts *projection.Receipts, pending *projection.Pending, agents *projection.Registry[decide.Agent], writer EventWriter, subj bus.Subjects, log *slog.Logger) *AgentConsumers {
	return &AgentConsumers{events: events, consumers: consumers, receipts: receipts, pending: pending, agents: agents,
		writer: writer, subj: subj, log: log, now: time.Now, retry: DefaultRetry,
		waiting: map[agentRef]*retryState{}, wake: make(chan struct{}, 1)}
}

// SetRetry replaces DefaultRetry; call it before the reconciler runs.
func (c *AgentConsumers) SetRetry(r Retry) { c.retry = r }

// Workers is how many agents the control consumer of one replica
// reconciles at once (each event's first try).
const Workers = 16

// AgentKey orders the control consumer's deliveries by agent (the event's
// aggregate subject): events of one agent are reconciled in order, those
// of different agents in parallel.
func AgentKey(m *bus.Message) string {
	if i := strings.LastIndexByte(m.Subject, '.'); i > 0 {
		return m.Subject[:i]
	}
	return m.Subject
}

// Project reconciles the consumer of the agent an event is about, once;
// events of other aggregates, the reconciler's own AgentConsumerFailed,
// and subjects agentbus would not write change nothing. A consumer that
// cannot be made (the command stream's consumer limit, a registration
// with more types than a consumer takes) is recorded at once; any other
// failure is left to Run to try again. It returns an error only while NATS
// is unavailable (the message is retried for as long as that lasts) or
// the failure could not be recorded.
func (c *AgentConsumers) Project(ctx context.Context, m *bus.Message) error {
	tenant, aggType, id, typ, ok := c.subj.ParseEvent(m.Subject)
	if !ok || aggType != decide.AggAgent || typ == decide.TypeAgentConsumerFailed {
		return nil
	}
	ref := agentRef{tenant, id}
	rctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	applied, err := c.reconcile(rctx, tenant, id, m.Seq)
	cancel()
	var f *failure
	switch {
	case err == nil:
		c.forget(ref, applied)
		return nil
	case errors.Is(err, errs.ErrUnavailable):
		return fmt.Errorf("agent %s of tenant %s: %w", id, tenant, err)
	case errors.As(err, &f) && f.final():
		return c.record(ctx, tenant, id, f)
	}
	c.later(ref, &retryState{atLeast: m.Seq, tries: 1, err: err})
	return nil
}

// reconcileTimeout bounds one try, well below the control consumer's
// ack_wait.
const reconcileTimeout = 4 * time.Second

// Policy is how the control consumer settles what Project returns: NATS
// unavailable is retried with a growing pause for as long as it lasts; a
// failure to record a consumer's failure up to 20 times.
func (c *AgentConsumers) Policy() settle.Policy {
	return settle.Policy{
		What: "reconcile an agent's consumer", Log: c.log,
		Backoff:  settle.Linear(250*time.Millisecond, 5*time.Second),
		Attempts: 20,
		Endless:  func(err error) bool { return errors.Is(err, errs.ErrUnavailable) },
	}
}

// failure is why an agent's consumer could not be made to match the
// agent event last, the agent's latest.
type failure struct {
	last   *bus.Message
	paused bool
	err    error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// final reports whether retrying soon cannot help: the stream has no room
// (errs.ErrLimit), or the registration lists more types than a consumer
// takes.
func (f *failure) final() bool {
	return errors.Is(f.err, errs.ErrLimit) || errors.Is(f.err, errTooManyTypes)
}

// reason says why, as an agent's record may show it (a NATS error's
// details are for the log).
func (f *failure) reason() string {
	switch {
	case errors.Is(f.err, errs.ErrLimit):
		return "the command stream takes no more consumers (its max_consumers, quotas.commandConsumers); another agent must be deleted first"
	case errors.Is(f.err, errTooManyTypes):
		return errTooManyTypes.Error()
	}
	return "it still failed after being retried (agentbus's log says why); the agent's next change tries again"
}

var errTooManyTypes = fmt.Errorf("the registration lists more than %d command types, as many as an agent's consumer filters on", decide.MaxConsumerFilters)

// record appends the agent's AgentConsumerFailed after f.last, as an event
// of f.last's command, so that the agent's record and that command's trace
// show it. Nothing is recorded when the agent changed since (its new state
// is reconciled in turn).
func (c *AgentConsumers) record(ctx context.Context, tenant, id string, f *failure) error {
	status := decide.AgentActive
	if f.paused {
		status = decide.AgentPaused
	}
	msg := ErrConsumerFailed.Error() + ": " + f.reason()
	ev := decide.NewEvent{Type: decide.TypeAgentConsumerFailed, AggType: decide.AggAgent, AggID: id,
		Data: decide.MustJSON(decide.ConsumerFailure{ID: id, At: decide.Stamp(c.now()), Status: status, Error: msg})}
	key := f.last.Header.Get(bus.HeaderMsgID)
	if key == "" {
		key = fmt.Sprintf("%s.%d", c.subj.Aggregate(tenant, decide.AggAgent, id), f.last.Seq)
	}
	err := c.writer.WriteEvent(ctx, tenant, decide.CorrelationOf(f.last), key, ev, f.last.Seq)
	switch {
	case errors.Is(err, errs.ErrConflict):
		return nil // the agent changed since: that change is reconciled in turn
	case err != nil:
		return fmt.Errorf("agent %s of tenant %s: record that its consumer failed (%v): %w", id, tenant, f.err, err)
	}
	c.log.Warn("an agent's consumer could not be made; recorded in its record and trace", "tenant", tenant, "agent", id, "seq", f.last.Seq, "err", f.err)
	return nil
}

// reconcile makes the agent's consumer reflect its latest event (at least
// atLeast), then reads the agent's latest event again and repeats while it
// is newer than what was applied: two replicas reconciling two events of
// one agent at once end with the consumer of the later one. It returns the
// sequence of the event the consumer reflects. Once the agent's state is
// read, a failure is a *failure.
func (c *AgentConsumers) reconcile(ctx context.Context, tenant, id string, atLeast uint64) (uint64, error) {
	for range 4 {
		applied, err := c.apply(ctx, tenant, id, atLeast)
		if err != nil {
			return 0, err
		}
		last, err := c.events.Last(ctx, c.subj.Aggregate(tenant, decide.AggAgent, id))
		if err != nil {
			return 0, fmt.Errorf("read again: %w", err)
		}
		if last.Seq <= applied {
			return applied, nil
		}
		atLeast = last.Seq
	}
	return 0, fmt.Errorf("the agent keeps changing: %w", errNotYet)
}

// apply makes the agent's consumer reflect the agent's latest event, which
// must be at least atLeast, and returns that event's sequence.
func (c *AgentConsumers) apply(ctx context.Context, tenant, id string, atLeast uint64) (uint64, error) {
	name := bus.AgentConsumer(tenant, id)
	last, err := c.events.Last(ctx, c.subj.Aggregate(tenant, decide.AggAgent, id))
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return 0, fmt.Errorf("no event found: %w", errNotYet)
	case err != nil:
		return 0, err
	case last.Seq < atLeast:
		return 0, fmt.Errorf("read event %d, older than %d: %w", last.Seq, atLeast, errNotYet)
	}
	_, _, _, lastType, _ := c.subj.ParseEvent(last.Subject)
	if lastType == decide.TypeAgentDeleted {
		return last.Seq, c.consumers.DeleteConsumer(ctx, name)
	}
	paused := decide.PausedAt(lastType, last)
	fail := func(err error) (uint64, error) {
		if err == nil {
			return last.Seq, nil
		}
		return 0, &failure{last: last, paused: paused, err: err}
	}
	reg, err := c.events.Last(ctx, c.subj.Event(bus.RootEvents, tenant, decide.AggAgent, id, decide.TypeAgentRegistered))
	switch {
	case errors.Is(err, errs.ErrNotFound):
		// Events of an agent that was never registered here (or whose
		// registration aged out of the event log): no consumer.
		c.log.Warn("agent events without a registration; no consumer", "tenant", tenant, "agent", id)
		return last.Seq, c.consumers.DeleteConsumer(ctx, name)
	case err != nil:
		return 0, fmt.Errorf("registration: %w", err)
	}
	data, err := decide.EventData(reg)
	rec, ok := decide.RegistrationOf(id, data)
	if err != nil || !ok {
		// Not what agentbus writes (any NATS publisher can append to the
		// log): its types must not become consumer filters.
		// A consumer of an earlier registration goes too: its filters
		// belong to a registration that is no longer the agent's.
		c.log.Error("agent registration event unreadable, or not this agent's, or with invalid types; no consumer", "tenant", tenant, "agent", id, "seq", reg.Seq, "err", err)
		return last.Seq, c.consumers.DeleteConsumer(ctx, name)
	}
	if len(rec.Accepts) == 0 {
		return last.Seq, c.consumers.DeleteConsumer(ctx, name) // accepts nothing: no consumer
	}
	if len(rec.Accepts) > decide.MaxConsumerFilters {
		return fail(errTooManyTypes)
	}
	regSeq := strconv.FormatUint(reg.Seq, 10)
	cur, err := c.consumers.Consumer(ctx, name)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		cur = nil
	case err != nil:
		return fail(err)
	case cur.Metadata[mdRegistration] != regSeq:
		// The consumer of an earlier registration of this id: start afresh.
		if err := c.consumers.DeleteConsumer(ctx, name); err != nil {
			return fail(err)
		}
		cur = nil
	case appliedSeq(cur) >= last.Seq && cur.Paused == paused:
		return last.Seq, nil
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
			return fail(err)
		}
	}
	return fail(c.consumers.PutConsumer(ctx, spec))
}

func appliedSeq(st *bus.ConsumerState) uint64 {
	n, _ := strconv.ParseUint(st.Metadata[mdApplied], 10, 64)
	return n
}

// start is where a new agent consumer starts: right after the
// RegisterAgent command in the command log, so it gets every command of its
// types accepted after its registration was, and none from before. The
// command's sequence comes from its receipt or, while the receipt has not
// recorded it yet (the history on this replica's disk lags the command
// log), from the command log past the processor consumer's ack
// floor. When neither has it, a registration under two minutes old is
// looked up again later (errNotYet: the command may not be visible yet);
// an older one starts the consumer at the
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
// seq (deleted: the consumer is gone). When the registry, having applied
// that event, shows that the consumer could not be made since, it returns
// ErrConsumerFailed with the record's error.
func (c *AgentConsumers) Settled(ctx context.Context, tenant, id string, seq uint64, deleted bool) (bool, error) {
	st, err := c.consumers.Consumer(ctx, bus.AgentConsumer(tenant, id))
	switch {
	case errors.Is(err, errs.ErrNotFound):
		if deleted {
			return true, nil
		}
		st = nil
	case err != nil:
		return false, err
	case deleted:
		reg, _ := strconv.ParseUint(st.Metadata[mdRegistration], 10, 64)
		return reg > seq, nil // only a later registration's consumer is left
	case appliedSeq(st) >= seq:
		return true, nil
	}
	rec, ok := c.agents.Get(tenant, id)
	switch {
	case ok && rec.Status == decide.AgentFailed:
		return false, fmt.Errorf("%w: %s", ErrConsumerFailed, rec.Error)
	case st == nil:
		return ok && len(rec.Accepts) == 0, nil // no consumer is right for an agent accepting nothing
	}
	return false, nil
}
