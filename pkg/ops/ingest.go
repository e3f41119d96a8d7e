// Package ops is agentbus's operations table — the one capability surface
// every transport (REST, MCP, A2A), the discovery manifest and the OpenAPI
// document are generated from — and the use cases behind it: submitting
// commands (ingest), the registry operations, and the queries (events,
// traces). It is transport-neutral: an operation has an id, its inputs,
// its output, the scope it needs and its error codes; how a transport
// exposes it lives with the transport. It talks to storage only through
// the bus ports and the projections.
package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/process"
	"github.com/agentbus/agentbus/pkg/project"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// Config holds the operations' settings. Zero values take the defaults
// noted.
type Config struct {
	Prefix string // subject prefix; default "agentbus"
	// Schemas builds the absolute schema URLs of catalogue entries (Base
	// default "http://127.0.0.1:8080", the public REST endpoint).
	Schemas catalog.URLs
	// PageDefault and PageMax bound pages; default 100 and 1000.
	PageDefault, PageMax int
	// AllowInjection turns on injectEvent (synthetic events; off by
	// default).
	AllowInjection bool
	// WaitTimeout bounds how long a registry write waits for its outcome
	// before answering "queued" with the trace; default 5s.
	WaitTimeout time.Duration
	// Reads bounds the reads of the event log (see ReadLimits).
	Reads ReadLimits
}

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = "agentbus"
	}
	if c.Schemas.Base == "" {
		c.Schemas.Base = "http://127.0.0.1:8080"
	}
	if c.PageDefault <= 0 {
		c.PageDefault = 100
	}
	if c.PageMax <= 0 {
		c.PageMax = 1000
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = 5 * time.Second
	}
	c.Reads.defaults()
}

// Ports are what the operations read and write.
type Ports struct {
	Commands  bus.Log
	Events    bus.Log
	Synthetic bus.Log
	// CommandConsumers are the command log's consumers (a trace tells
	// whether its command was delivered).
	CommandConsumers bus.ConsumerAdmin
	Receipts         *project.Receipts
	Registries       *project.Registries
	AgentConsumers   *project.AgentConsumers
	Pending          *project.Pending
	// ControlPlane says which command types agentbus processes itself
	// (ProcessedHere): agents cannot accept them.
	ControlPlane decide.ControlPlane
	// Handoff, when set, passes the commands queued here to this
	// process's processor in memory (process.Handoff); nil when it runs
	// elsewhere.
	Handoff *process.Handoff
	// Secrets keep the webhook subscriptions' signing secrets, stored
	// before a command that carries one is queued without it.
	Secrets SecretStore
	// URLs decides whether a webhook URL may be subscribed.
	URLs URLChecker
	// Webhooks is webhook delivery's control: deliveries, replay,
	// redelivery.
	Webhooks *webhook.Control
}

// Surface is the operations and their use cases. Safe for concurrent use.
type Surface struct {
	cfg     Config
	cat     *catalog.Catalog
	p       Ports
	subj    bus.Subjects
	log     *slog.Logger
	now     func() time.Time
	scans   chan struct{} // the pending-command scans running (traces)
	lookups lookups       // "accepted before?" at ingest, grouped
	// unservedUpTo is the highest sequence of an unservable event warned
	// about (see servable), so each is logged about once.
	unservedUpTo atomic.Uint64

	// reads holds the places of the event log reads running; tails size
	// the reads of the event logs (events, synthetic).
	reads *readGate
	tails struct{ events, synthetic *tail }
}

// New returns the operations on ports.
func New(cfg Config, cat *catalog.Catalog, p Ports, log *slog.Logger) *Surface {
	cfg.defaults()
	s := &Surface{cfg: cfg, cat: cat, p: p, subj: bus.Subjects{Prefix: cfg.Prefix}, log: log,
		now: time.Now, scans: make(chan struct{}, maxScans), reads: newReadGate(cfg.Reads)}
	s.tails.events, s.tails.synthetic = &tail{log: p.Events}, &tail{log: p.Synthetic}
	if p.Receipts != nil {
		s.lookups.kv = p.Receipts.KV()
	}
	return s
}

// Catalog returns the catalogue.
func (s *Surface) Catalog() *catalog.Catalog { return s.cat }

// Accepted is the answer to a command submission.
type Accepted struct {
	ID string `json:"id"` // the correlation id
	// Seq is the command's sequence in the command log (the earlier copy's
	// when JetStream recognised a resubmission); 0 when its receipt showed
	// it accepted before, so nothing was published.
	Seq uint64
}

// SubmitCommand validates raw as a command envelope of tenant, checks it
// against the catalogue and queues it. It returns only once the command is
// stored. Resubmitting the same (source, id) returns the same id and queues
// nothing. A webhook secret in the command (CreateSubscription,
// RotateSubscriptionSecret) is stored apart and the command queued without
// it. Errors: MALFORMED_JSON, VALIDATION_FAILED, UNKNOWN_COMMAND_TYPE,
// WEBHOOK_URL_REJECTED, or an internal error when the store fails.
func (s *Surface) SubmitCommand(ctx context.Context, tenant string, raw []byte) (*Accepted, error) {
	env, err := envelope.Decode(raw, envelope.Command)
	if err != nil {
		return nil, err
	}
	entry, err := s.cat.ResolveCommand(env)
	if err != nil {
		return nil, err
	}
	if kept, err := s.keepSecretApart(ctx, tenant, env); err != nil {
		return nil, err
	} else if kept != nil {
		raw = kept
	}
	return s.enqueue(ctx, tenant, env, entry, raw)
}

// enqueue stores a command checked against entry unless its receipt says
// it was accepted before.
func (s *Surface) enqueue(ctx context.Context, tenant string, env *envelope.Envelope, entry *catalog.Entry, raw []byte) (*Accepted, error) {
	corr := envelope.CorrelationID(tenant, env.Source, env.ID)
	if found, err := s.lookups.exists(ctx, project.Key(tenant, corr)); err != nil {
		return nil, errs.Internal(fmt.Errorf("receipt lookup: %w", err))
	} else if found {
		return &Accepted{ID: corr}, nil
	}
	// Offered before the store answers; settled exactly once, whatever
	// happens, with the sequence only when the store took it as new.
	var stored uint64
	if s.p.ControlPlane.Processes(env.Type) {
		offered := s.p.Handoff.Offer(corr, raw, env, entry)
		defer func() { s.p.Handoff.Settle(offered, stored) }()
	}
	msg := &bus.Message{
		Subject: s.subj.Command(tenant, env.Type),
		Header: bus.Header{
			bus.HeaderMsgID:         {corr},
			bus.HeaderCorrelationID: {corr},
		},
		Data: raw,
	}
	seq, err := s.p.Commands.Append(ctx, []*bus.Message{msg}, nil)
	switch {
	case errors.Is(err, errs.ErrDuplicate):
		if err := s.sameCommand(ctx, tenant, corr, seq); err != nil {
			return nil, err
		}
		return &Accepted{ID: corr, Seq: seq}, nil
	case errors.Is(err, errs.ErrTooLarge):
		return nil, errs.New(errs.CodePayloadTooLarge, "the command is larger than the command log takes")
	case err != nil:
		return nil, errs.Internal(fmt.Errorf("queue command: %w", err))
	}
	stored = seq
	return &Accepted{ID: corr, Seq: seq}, nil
}

// sameCommand checks that the stored message the command log named as
// this command's duplicate (at seq; 0 when it did not say) is this
// command: any NATS publisher can send another command under its message
// id, and answering 202 for it would accept a command that is not stored.
// The check is best effort and short: a duplicate is also what a publish
// retried during a leader election finds (its first try was stored), and
// then the log may not answer reads for seconds; a read that fails or
// takes longer than sameCommandWait lets the duplicate count as this
// command, as it did before the check.
func (s *Surface) sameCommand(ctx context.Context, tenant, corr string, seq uint64) error {
	if seq == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, sameCommandWait)
	defer cancel()
	m, err := s.p.Commands.Get(rctx, seq)
	if err != nil {
		return nil // aged out while its id is still remembered, or unreadable now
	}
	if _, ok := decide.StoredCommand(s.subj, m, tenant, corr); !ok {
		s.log.Warn("a different message holds a command's id in the command log", "correlationId", corr, "seq", seq, "subject", m.Subject)
		return errs.New(errs.CodeConflict, "a different message already holds the id %s that this command's source and id give it, so it was not queued; submit it with another id", corr)
	}
	return nil
}

// sameCommandWait bounds sameCommand's read.
const sameCommandWait = 500 * time.Millisecond
