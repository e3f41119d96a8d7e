// Package ingest is agentbus's way in: commands submitted (checked against
// the envelope rules and the catalogue, and queued once, whatever the
// retries) and events injected for testing. It talks to storage only
// through the bus ports and the receipts, and is safe for concurrent use.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/execute"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// Config holds ingest's settings. Zero values take the defaults noted.
type Config struct {
	Prefix string // subject prefix; default "agentbus"
	// Schemas builds the absolute schema URLs of catalogue entries (Base
	// default "http://127.0.0.1:8080", the public REST endpoint).
	Schemas catalog.URLs
	// AllowInjection turns on InjectEvent (synthetic events; off by
	// default).
	AllowInjection bool
	// DuplicateWindow is the command log's duplicate window. When set, a
	// command is asked about in the receipts' history on disk alone while
	// that history is current within half of it: the log itself refuses
	// a copy stored within the window, and the history holds every
	// command stored before. 0: the history is brought up to the command
	// log's end before every lookup.
	DuplicateWindow time.Duration
}

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = "agentbus"
	}
	if c.Schemas.Base == "" {
		c.Schemas.Base = "http://127.0.0.1:8080"
	}
}

// Ports are what ingest reads and writes.
type Ports struct {
	Commands  bus.Log
	Synthetic bus.Log
	// Receipts say whether a command was accepted before.
	Receipts *projection.Receipts
	// ControlPlane says which command types agentbus processes itself
	// (those are offered to Handoff).
	ControlPlane decide.ControlPlane
	// Handoff, when set, passes the commands queued here to this
	// process's processor in memory (process.Handoff); nil when it runs
	// elsewhere.
	Handoff *execute.Handoff
	// Secrets keep the webhook subscriptions' signing secrets, stored
	// before a command that carries one is queued without it.
	Secrets SecretStore
	// URLs decides whether a webhook URL may be subscribed.
	URLs URLChecker
}

// Ingest submits commands and injects events. Safe for concurrent use.
type Ingest struct {
	cfg  Config
	cat  *catalog.Catalog
	p    Ports
	subj bus.Subjects
	log  *slog.Logger
}

// New returns ingest on ports.
func New(cfg Config, cat *catalog.Catalog, p Ports, log *slog.Logger) *Ingest {
	cfg.defaults()
	return &Ingest{cfg: cfg, cat: cat, p: p, subj: bus.Subjects{Prefix: cfg.Prefix}, log: log}
}

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
// it. An internal command (catalog.Entry.Internal), which only agentbus
// submits (Enqueue), is refused FORBIDDEN before it is checked further.
// Errors: MALFORMED_JSON, VALIDATION_FAILED, UNKNOWN_COMMAND_TYPE,
// FORBIDDEN, WEBHOOK_URL_REJECTED, those of Enqueue.
func (in *Ingest) SubmitCommand(ctx context.Context, tenant string, raw []byte) (*Accepted, error) {
	return in.SubmitChecked(ctx, tenant, raw, nil)
}

// SubmitChecked is SubmitCommand with check, when set, run on the decoded
// envelope before the catalogue is consulted: its error is returned as it
// is, and nothing is stored. The envelope is decoded once for both.
func (in *Ingest) SubmitChecked(ctx context.Context, tenant string, raw []byte, check func(*envelope.Envelope) error) (*Accepted, error) {
	env, err := envelope.Decode(raw, envelope.Command)
	if err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(env); err != nil {
			return nil, err
		}
	}
	// One snapshot for both, so that a reload between them cannot resolve
	// a command the check saw in another catalogue.
	snap := in.cat.Current()
	if err := internal(snap.CommandVersions(env.Type)); err != nil {
		return nil, err
	}
	entry, err := snap.ResolveCommand(env)
	if err != nil {
		return nil, err
	}
	// Asked before its secret is kept apart: a resubmission must not store
	// its secret again (a rotation repeated after another would set the
	// older secret back, with no event saying so).
	if acc, err := in.acceptedBefore(ctx, tenant, env, carriesSecret(env)); acc != nil || err != nil {
		return acc, err
	}
	if kept, err := in.keepSecretApart(ctx, tenant, env); err != nil {
		return nil, err
	} else if kept != nil {
		raw = kept
	}
	return in.store(ctx, tenant, env, entry, raw)
}

// acceptedBefore returns the answer to a command whose receipt says it was
// accepted before, or nil for a new one.
//
// A copy stored within the duplicate window is refused by the command log
// itself (store); one stored before it is in the receipts' history on
// disk, which this replica keeps and which holds the command log up to
// moments ago. So while the history is current within half the window,
// it alone answers, with no request to NATS; between half and all of the
// window behind, it is first brought up to the command log's end (as is
// it with no window); further behind (its follower stopped) is
// errs.ErrUnavailable, to be asked again, rather than a command stored
// twice.
//
// sure brings the history up to the command log's end first too: for a
// command that changes something before it is stored (a secret kept
// apart), on which the log's refusal of a copy comes too late.
func (in *Ingest) acceptedBefore(ctx context.Context, tenant string, env *envelope.Envelope, sure bool) (*Accepted, error) {
	corr := envelope.CorrelationID(tenant, env.Source, env.ID)
	if in.p.Receipts == nil {
		return nil, nil
	}
	w := in.cfg.DuplicateWindow
	if w > 0 && !in.p.Receipts.HistoryCurrent(w) {
		// Past the window, a copy stored before it may be in neither the
		// log's memory of ids nor a history this far behind: say busy
		// rather than store it again.
		return nil, catchingUp(fmt.Errorf("the history of receipts lags the command log by more than the duplicate window: %w", errs.ErrUnavailable))
	}
	if w == 0 || sure || !in.p.Receipts.HistoryCurrent(w/2) {
		if err := in.p.Receipts.CommandsCurrent(ctx); err != nil {
			return nil, catchingUp(err)
		}
	}
	switch old, err := in.p.Receipts.InHistory(tenant, corr); {
	case errors.Is(err, errs.ErrUnavailable):
		return nil, err
	case err != nil:
		return nil, errs.Internal(fmt.Errorf("receipt history lookup: %w", err))
	case old:
		return &Accepted{ID: corr}, nil
	}
	return nil, nil
}

// catchingUp is the answer while this replica's history of receipts is
// behind the command log (err).
func catchingUp(err error) error {
	e := errs.Unavailable("this replica is catching up with the command log, so it cannot yet tell whether the command was accepted before; retry shortly")
	e.Err = err
	return e
}

// Enqueue stores a command of tenant checked against entry (env decoded
// from raw) unless its receipt says it was accepted before, as
// SubmitCommand does once the command is checked. Errors: CONFLICT,
// PAYLOAD_TOO_LARGE, or an internal error when the store fails.
func (in *Ingest) Enqueue(ctx context.Context, tenant string, env *envelope.Envelope, entry *catalog.Entry, raw []byte) (*Accepted, error) {
	if acc, err := in.acceptedBefore(ctx, tenant, env, false); acc != nil || err != nil {
		return acc, err
	}
	return in.store(ctx, tenant, env, entry, raw)
}

// store stores a command checked against entry, new as far as its receipt
// says. Errors: those of Enqueue.
func (in *Ingest) store(ctx context.Context, tenant string, env *envelope.Envelope, entry *catalog.Entry, raw []byte) (*Accepted, error) {
	corr := envelope.CorrelationID(tenant, env.Source, env.ID)
	// Offered before the store answers; settled exactly once, whatever
	// happens, with the sequence only when the store took it as new.
	var stored uint64
	if in.p.ControlPlane.Processes(env.Type) {
		offered := in.p.Handoff.Offer(corr, raw, env, entry)
		defer func() { in.p.Handoff.Settle(offered, stored) }()
	}
	msg := &bus.Message{
		Subject: in.subj.Command(tenant, env.Type),
		Header: bus.Header{
			bus.HeaderMsgID:         {corr},
			bus.HeaderCorrelationID: {corr},
		},
		Data: raw,
	}
	tracing.Inject(ctx, msg.Header)
	seq, err := in.p.Commands.Append(ctx, []*bus.Message{msg}, nil)
	switch {
	case errors.Is(err, errs.ErrDuplicate):
		if err := in.sameCommand(ctx, tenant, corr, seq); err != nil {
			return nil, err
		}
		return &Accepted{ID: corr, Seq: seq}, nil
	case errors.Is(err, errs.ErrTooLarge):
		return nil, errs.New(errs.CodePayloadTooLarge, "the command is larger than the command log takes")
	case err != nil:
		return nil, errs.Internal(fmt.Errorf("queue command: %w", err))
	}
	stored = seq
	in.p.Receipts.Appended(seq)
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
func (in *Ingest) sameCommand(ctx context.Context, tenant, corr string, seq uint64) error {
	if seq == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, sameCommandWait)
	defer cancel()
	m, err := in.p.Commands.Get(rctx, seq)
	if err != nil {
		return nil // aged out while its id is still remembered, or unreadable now
	}
	if _, ok := decide.StoredCommand(in.subj, m, tenant, corr); !ok {
		in.log.WarnContext(ctx, "a different message holds a command's id in the command log", "correlationId", corr, "seq", seq, "subject", m.Subject)
		return errs.New(errs.CodeConflict, "a different message already holds the id %s that this command's source and id give it, so it was not queued; submit it with another id", corr)
	}
	return nil
}

// sameCommandWait bounds sameCommand's read.
const sameCommandWait = 500 * time.Millisecond

// internal returns FORBIDDEN for a command type whose catalogue entries
// (versions) are internal.
func internal(versions []*catalog.Entry) error {
	for _, e := range versions {
		if e.Internal {
			return &errs.Error{Code: errs.CodeForbidden,
				Message:    fmt.Sprintf("%s is an internal command: agentbus submits it itself, no caller can", e.Type),
				Violations: []errs.Violation{{Path: "$.type", Message: "is an internal command type"}}}
		}
	}
	return nil
}
