// Package app holds agentbus's use cases: submitting commands, processing
// them into events, the correlation index (receipts) and the queries. It
// talks to storage only through the bus ports and knows nothing of HTTP.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// Config holds the app's settings. Zero values take the defaults noted.
type Config struct {
	Prefix string // subject prefix; default "agentbus"
	// Source is the envelope source of events agentbus publishes; default
	// "agentbus".
	Source string
	// SchemaBase is the absolute base URL event dataschema URIs are built on
	// (the public REST endpoint); default "http://127.0.0.1:8080".
	SchemaBase string
	// MultiTenant puts "/{tenant}" in schema URIs.
	MultiTenant bool
	// PageDefault and PageMax bound GET /events pages; default 100 and 1000.
	PageDefault, PageMax int
	// AllowInjection turns on POST /events (synthetic events; off by default).
	AllowInjection bool
	// WaitTimeout bounds how long a registry write (POST /agents, ...)
	// waits for its outcome before answering 202 with the trace; default 5s.
	WaitTimeout time.Duration
	// DuplicateWindow is the command stream's (streams.duplicateWindow;
	// default 2m). A copy of a command can be stored only once its first
	// message is older than this, so a command handed over in memory is
	// checked against its receipt only when it waited that long.
	DuplicateWindow time.Duration
	// MaxAttempts is how often a command is tried before it is rejected
	// with INTERNAL_ERROR (default 10; keep it below the processor
	// consumer's max_deliver).
	MaxAttempts int
}

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = "agentbus"
	}
	if c.Source == "" {
		c.Source = "agentbus"
	}
	if c.SchemaBase == "" {
		c.SchemaBase = "http://127.0.0.1:8080"
	}
	if c.PageDefault <= 0 {
		c.PageDefault = 100
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	if c.PageMax <= 0 {
		c.PageMax = 1000
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = 5 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
}

// Ports are the storage ports the app runs on.
type Ports struct {
	Commands  bus.Log
	Events    bus.Log
	Synthetic bus.Log
	Receipts  bus.IndexKV
	// Consumers manages the agents' consumers on the command log. Optional
	// (see control.go).
	Consumers bus.ConsumerAdmin
	// EventConsumers reads the consumers of the event log. Optional: with
	// it, a command that may have been processed moments ago (a
	// redelivery, a copy decided meanwhile) is decided only once the
	// receipts consumer has projected the events stored before it looked
	// (see processedBefore).
	EventConsumers bus.ConsumerAdmin
}

// App is agentbus's use-case layer. Safe for concurrent use.
type App struct {
	cfg      Config
	cat      *catalog.Catalog
	p        Ports
	subj     Subjects
	log      *slog.Logger
	deciders map[string]Decider
	now      func() time.Time
	ctl      *control // registries and agent consumers (control.go)
	written  writtenCache
	handoff  *handoff      // nil unless EnableHandoff
	scans    chan struct{} // the pending-command scans running (findPending)
	// unservedUpTo is the highest sequence of an unservable event warned
	// about (see servable), so each is logged about once.
	unservedUpTo atomic.Uint64
	// receiptsUpTo is the event sequence up to which the receipts
	// consumer was last seen to have projected everything; receiptsStuck,
	// in Unix nanoseconds, until when processedBefore does not wait for it.
	receiptsUpTo  atomic.Uint64
	receiptsStuck atomic.Int64
	decided       decidedSet // outcomes stored here lately (processedBefore)
	lookups       lookups    // "accepted before?" at ingest, grouped
}

// New returns an App. Deciders for catalogue rules are registered from cat;
// more can be added with Handle before processing starts.
func New(cfg Config, cat *catalog.Catalog, p Ports, log *slog.Logger) *App {
	cfg.defaults()
	a := &App{cfg: cfg, cat: cat, p: p, subj: Subjects{Prefix: cfg.Prefix}, log: log,
		deciders: map[string]Decider{}, now: time.Now, scans: make(chan struct{}, maxScans),
		decided: decidedSet{ids: newRecent[struct{}](maxDecided, 0)}, lookups: lookups{kv: p.Receipts}}
	for _, e := range cat.Commands() {
		if e.Rule != nil {
			a.deciders[e.Type] = ruleDecider{}
		}
	}
	a.ctl = newControl(a)
	return a
}

// Config returns the effective config.
func (a *App) Config() Config { return a.cfg }

// Catalog returns the catalogue.
func (a *App) Catalog() *catalog.Catalog { return a.cat }

// Subjects returns the subject builder.
func (a *App) Subjects() Subjects { return a.subj }

// Handle registers d as the processor of command type typ, replacing any
// catalogue rule.
func (a *App) Handle(typ string, d Decider) { a.deciders[typ] = d }

// ProcessedTypes lists the command types this app's processor handles.
func (a *App) ProcessedTypes() []string {
	out := make([]string, 0, len(a.deciders))
	for t := range a.deciders {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// UnprocessedTypes lists the catalogue's command types no processor in
// this app handles: they wait on the command stream for agents and external
// processors.
func (a *App) UnprocessedTypes() []string {
	var out []string
	for _, e := range a.cat.Commands() {
		if _, ok := a.deciders[e.Type]; !ok && !slices.Contains(out, e.Type) {
			out = append(out, e.Type)
		}
	}
	sort.Strings(out)
	return out
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
// nothing. Errors: MALFORMED_JSON, VALIDATION_FAILED, UNKNOWN_COMMAND_TYPE,
// or an internal error when the store fails.
func (a *App) SubmitCommand(ctx context.Context, tenant string, raw []byte) (*Accepted, error) {
	env, err := envelope.Decode(raw, envelope.Command)
	if err != nil {
		return nil, err
	}
	entry, err := a.cat.ResolveCommand(env)
	if err != nil {
		return nil, err
	}
	return a.enqueue(ctx, tenant, env, entry, raw)
}

// enqueue stores a command checked against entry unless its receipt says
// it was accepted before.
func (a *App) enqueue(ctx context.Context, tenant string, env *envelope.Envelope, entry *catalog.Entry, raw []byte) (*Accepted, error) {
	corr := envelope.CorrelationID(tenant, env.Source, env.ID)
	if found, err := a.lookups.exists(ctx, receiptKey(tenant, corr)); err != nil {
		return nil, errs.Internal(fmt.Errorf("receipt lookup: %w", err))
	} else if found {
		return &Accepted{ID: corr}, nil
	}
	// Offered before the store answers; settled exactly once, whatever
	// happens, with the sequence only when the store took it as new.
	var stored uint64
	if _, ok := a.deciders[env.Type]; ok {
		offered := a.handoff.offer(corr, raw, env, entry)
		defer func() { a.handoff.settle(offered, stored) }()
	}
	msg := &bus.Message{
		Subject: a.subj.Command(tenant, env.Type),
		Header: bus.Header{
			bus.HeaderMsgID:         {corr},
			bus.HeaderCorrelationID: {corr},
		},
		Data: raw,
	}
	seq, err := a.p.Commands.Append(ctx, []*bus.Message{msg}, nil)
	switch {
	case errors.Is(err, errs.ErrDuplicate):
		if err := a.sameCommand(ctx, tenant, corr, seq); err != nil {
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
func (a *App) sameCommand(ctx context.Context, tenant, corr string, seq uint64) error {
	if seq == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, sameCommandWait)
	defer cancel()
	m, err := a.p.Commands.Get(rctx, seq)
	if err != nil {
		return nil // aged out while its id is still remembered, or unreadable now
	}
	if _, ok := a.storedCommand(m, tenant, corr); !ok {
		a.log.Warn("a different message holds a command's id in the command log", "correlationId", corr, "seq", seq, "subject", m.Subject)
		return errs.New(errs.CodeConflict, "a different message already holds the id %s that this command's source and id give it, so it was not queued; submit it with another id", corr)
	}
	return nil
}

// sameCommandWait bounds sameCommand's read.
const sameCommandWait = 500 * time.Millisecond

func receiptKey(tenant, corr string) string { return tenant + "." + corr }

// eventSchemaURI is the absolute dataschema of a typed event for tenant.
func (a *App) eventSchemaURI(tenant string, e *catalog.Entry) string {
	return a.SchemaURL(tenant, catalog.KindEvent, e)
}

// SchemaURL is the absolute URL of an entry's schema document.
func (a *App) SchemaURL(tenant string, kind catalog.Kind, e *catalog.Entry) string {
	return a.schemaDir(tenant, kind) + e.Schema + "/" + e.Version
}

// schemaDir is the URL, with its trailing slash, under which tenant's
// schema documents of kind are served.
func (a *App) schemaDir(tenant string, kind catalog.Kind) string {
	return a.schemaBase(tenant) + "/" + string(kind) + "s/"
}

// schemaBase is the URL schema documents of tenant are served under.
func (a *App) schemaBase(tenant string) string {
	if a.cfg.MultiTenant {
		return a.cfg.SchemaBase + "/" + tenant
	}
	return a.cfg.SchemaBase
}

// newEvent builds the envelope of an event agentbus publishes.
func (a *App) newEvent(tenant, id, typ string, data []byte) *envelope.Envelope {
	env := &envelope.Envelope{
		SpecVersion: envelope.SpecVersion, ID: id, Source: a.cfg.Source, Type: typ,
		DataContentType: envelope.ContentType, Time: a.stamp(), Data: data,
	}
	if e, ok := a.cat.LatestEvent(typ); ok && e.Typed() {
		env.DataSchema = a.eventSchemaURI(tenant, e)
	}
	return env
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
