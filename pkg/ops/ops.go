// Package ops is agentbus's operations table — the one capability surface
// every transport (REST, MCP, A2A), the discovery manifest and the OpenAPI
// document are generated from — and the operations' handlers: submitting
// commands and injecting events (on pkg/ingest), the registry,
// subscription and webhook delivery operations, and the reads of events and
// traces (on pkg/query). It is transport-neutral: an operation has an id,
// its inputs, its output, the scope it needs and its error codes; how a
// transport exposes it lives with the transport. It talks to storage only
// through the bus ports and the projections.
package ops

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/process"
	"github.com/agentbus/agentbus/pkg/project"
	"github.com/agentbus/agentbus/pkg/push"
	"github.com/agentbus/agentbus/pkg/query"
	"github.com/agentbus/agentbus/pkg/reconcile"
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
	// Reads bounds the reads of the event log (see query.ReadLimits).
	Reads query.ReadLimits
	// Streams bounds the live event streams.
	Streams StreamConfig
	// Middleware wraps every call of every transport (see Middleware),
	// outermost first; none by default.
	Middleware []Middleware
	// Live, when set, is called as each live stream opens (Call.Stream,
	// Call.Slot) with the caller's transport, and the function it returns
	// as the stream ends.
	Live func(transport string) (closed func())
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
	c.Streams.defaults()
}

// Ports are what the operations, their ingest and their reads read and
// write.
type Ports struct {
	Commands  bus.Log
	Events    bus.Log
	Synthetic bus.Log
	// TypeIndex finds the events of given types (nil: reads by type
	// filter the log).
	TypeIndex *project.TypeIndex
	// CommandConsumers are the command log's consumers (a trace tells
	// whether its command was delivered).
	CommandConsumers bus.ConsumerAdmin
	Receipts         *project.Receipts
	Registries       *project.Registries
	AgentConsumers   *reconcile.AgentConsumers
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
	// Hub hands out the events this replica sees published, for live
	// streams and watched commands; nil serves neither.
	Hub *push.Hub
}

// Surface is the operations and their handlers. Safe for concurrent use.
type Surface struct {
	cfg   Config
	cat   *catalog.Catalog
	p     Ports
	subj  bus.Subjects
	log   *slog.Logger
	now   func() time.Time
	in    *ingest.Ingest
	reads *query.Reader
	live  streams
	door  *door
}

// New returns the operations on ports, with their ingest and their reads.
func New(cfg Config, cat *catalog.Catalog, p Ports, log *slog.Logger) *Surface {
	cfg.defaults()
	s := &Surface{cfg: cfg, cat: cat, p: p, subj: bus.Subjects{Prefix: cfg.Prefix}, log: log, now: time.Now,
		live: streams{byCaller: map[string]int{}}}
	s.door = newDoor(cfg.Middleware, cfg.Streams, &s.live, cfg.Live)
	s.in = ingest.New(ingest.Config{Prefix: cfg.Prefix, Schemas: cfg.Schemas, AllowInjection: cfg.AllowInjection}, cat, ingest.Ports{
		Commands: p.Commands, Synthetic: p.Synthetic, Receipts: p.Receipts, ControlPlane: p.ControlPlane, Handoff: p.Handoff,
		Secrets: p.Secrets, URLs: p.URLs,
	}, log)
	qp := query.Ports{Commands: p.Commands, Events: p.Events, Synthetic: p.Synthetic, TypeIndex: p.TypeIndex,
		CommandConsumers: p.CommandConsumers,
		Receipts:         p.Receipts, Registries: p.Registries, Pending: p.Pending, ControlPlane: p.ControlPlane}
	if p.Webhooks != nil {
		qp.Deliveries = p.Webhooks.Deliveries
	}
	s.reads = query.New(query.Config{Prefix: cfg.Prefix, PageDefault: cfg.PageDefault, PageMax: cfg.PageMax, Reads: cfg.Reads}, qp, log)
	return s
}

// Catalog returns the catalogue.
func (s *Surface) Catalog() *catalog.Catalog { return s.cat }

// Ingest returns the operations' ingest: command submission and event
// injection.
func (s *Surface) Ingest() *ingest.Ingest { return s.in }

// Reader returns the operations' reads of events and traces.
func (s *Surface) Reader() *query.Reader { return s.reads }

// Scope is the permission an operation needs.
type Scope string

// Scopes a credential can carry.
const (
	ScopeRead  Scope = "read"
	ScopeWrite Scope = "write"
	ScopeAdmin Scope = "admin"
)

// Param is one named input of an operation besides its body (a path
// segment or a query parameter over REST, a tool argument over MCP).
type Param struct {
	Name        string
	Description string
	Repeated    bool // may be given more than once
	Required    bool
	// Enum, when set, lists the values it takes.
	Enum []string
}

// Request is a transport-neutral operation call.
type Request struct {
	Tenant string
	// Caller identifies the credential the request came with (an API
	// key's id, also for the tokens issued to it); "" for an anonymous
	// caller. Reads are bounded per caller.
	Caller string
	Params map[string][]string // by Param name
	Body   []byte              // when the operation takes one
	// Valid, when set, reports whether the caller's credential still
	// holds (UNAUTHENTICATED once revoked or expired): what outlives the
	// request (a live stream) asks it now and then, and ends when it
	// fails.
	Valid func(context.Context) error
}

// Param returns the first value of the named parameter, or "".
func (r *Request) Param(name string) string {
	if v := r.Params[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Outcome is how an operation succeeded.
type Outcome int

// Outcomes.
const (
	// Done: the result is in Body (or Raw).
	Done Outcome = iota
	// Created: a resource was created; Body describes it, Location names it.
	Created
	// Queued: the work is accepted and goes on; Location names its trace.
	Queued
	// Empty: done, with nothing to say.
	Empty
)

// Response is a transport-neutral result. Body is marshalled as JSON unless
// Raw is set, which is sent as is with ContentType.
type Response struct {
	Outcome     Outcome
	Body        any
	Raw         []byte
	ContentType string
	Location    string // path of the created or tracked resource, relative to the tenant base
}

// Operation is one entry of the operations table.
type Operation struct {
	ID         string // the same in every transport
	Capability string // the manifest capability it belongs to
	Summary    string
	Scope      Scope
	Params     []Param
	// Body, when set, is the document the operation takes (a command
	// envelope, a registration).
	Body *Body
	// Output describes what a success returns; ContentType is its media
	// type (default application/json).
	Output      string
	ContentType string
	// Outcomes lists how it can succeed, the usual one first.
	Outcomes []Outcome
	// Errors lists the error codes it answers beyond those of every
	// operation (bad input, credentials, scope, rate, internal).
	Errors []errs.Code
	// Disabled, when set, says why configuration switched the operation
	// off: it answers CAPABILITY_NOT_SUPPORTED (before any scope check) and
	// is left out of the manifest's endpoints and the OpenAPI document.
	Disabled string
	// Handle runs the operation. Transports reach it through the door
	// (Admit, then Call.Invoke), never directly.
	Handle func(ctx context.Context, r *Request) (*Response, error)
	// Stream, when set, serves the operation live to a transport that can
	// stream (SSE): what Handle answers a page at a time, followed as it
	// grows, until ctx ends. It fails, before emitting anything, where
	// Handle would.
	Stream func(ctx context.Context, r *Request, emit Emit) error

	// door is the Surface's, set by Operations: what a Call runs through.
	door *door
}

// Body describes the document an operation takes.
type Body struct {
	Description string
	// Schema is its JSON Schema.
	Schema map[string]any
}

// InputSchema is the JSON Schema of an operation's whole input as one
// object: a member per parameter (a string, or an array of strings when it
// repeats) and, when it takes a document, "body". Transports without
// paths and queries (MCP tools, A2A skills) take their input in this form.
func (o Operation) InputSchema() map[string]any {
	props := map[string]any{}
	required := []string{}
	for _, p := range o.Params {
		s := map[string]any{"type": "string", "description": p.Description}
		if len(p.Enum) > 0 {
			s["enum"] = p.Enum
		}
		if p.Repeated {
			s = map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": p.Description}
		}
		props[p.Name] = s
		if p.Required {
			required = append(required, p.Name)
		}
	}
	if o.Body != nil {
		body := map[string]any{"type": "object", "description": o.Body.Description}
		if o.Body.Schema != nil {
			body = map[string]any{"allOf": []any{o.Body.Schema}, "description": o.Body.Description}
		}
		props["body"] = body
		required = append(required, "body")
	}
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

// EnvelopeSchema is the JSON Schema of the message envelope (commands and
// events): the checks pkg/envelope makes, as far as JSON Schema says them.
func EnvelopeSchema() map[string]any {
	str := map[string]any{"type": "string"}
	return map[string]any{
		"type": "object", "additionalProperties": false,
		"required": []string{"specversion", "id", "source", "type", "datacontenttype", "time", "data"},
		"properties": map[string]any{
			"specversion":     map[string]any{"const": "1.0"},
			"id":              str,
			"source":          str,
			"type":            map[string]any{"type": "string", "pattern": "^[A-Z][A-Za-z0-9]*$"},
			"datacontenttype": map[string]any{"const": "application/json"},
			"dataschema":      str,
			"time":            map[string]any{"type": "string", "format": "date-time"},
			"data":            map[string]any{"type": "object"},
		},
	}
}

// Errors every operation can answer.
var CommonErrors = []errs.Code{errs.CodeInvalidRequest, errs.CodeValidationFailed, errs.CodeUnauthenticated,
	errs.CodeForbidden, errs.CodeTenantNotFound, errs.CodeRateLimited, errs.CodeInternal, errs.CodeUnavailable}

// Operations returns the operations table.
func (s *Surface) Operations() []Operation {
	ops := []Operation{
		{ID: "submitCommand", Capability: "commands", Scope: ScopeWrite, Outcomes: []Outcome{Queued},
			Body:   &Body{Description: "a command in the message envelope", Schema: EnvelopeSchema()},
			Output: "{id: the correlation id, status: accepted}",
			Errors: []errs.Code{errs.CodeMalformedJSON, errs.CodeUnknownCommandType, errs.CodePayloadTooLarge, errs.CodeConflict,
				errs.CodeWebhookURLRejected},
			Summary: "Submit a command in the message envelope; returns its correlation id.", Handle: s.opSubmit},
		{ID: "listCommandCatalog", Capability: "commands", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Output:  "{commands: [catalogue entries]}",
			Summary: "List the command catalogue.", Handle: s.opCommandCatalog},
		{ID: "getCommandSchema", Capability: "commands", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Params:      []Param{schemaParam, versionParam},
			Output:      "the command's JSON Schema document",
			ContentType: "application/schema+json", Errors: []errs.Code{errs.CodeSchemaNotFound},
			Summary: "Get a command's JSON Schema.", Handle: s.opSchema(catalog.KindCommand)},
		{ID: "listEvents", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Output:  "{events: [event envelopes], next: cursor}",
			Summary: "List events in stream order, a page at a time.",
			Params: []Param{
				{Name: "type", Description: "event type to include (repeatable)", Repeated: true},
				{Name: "correlationId", Description: "only events caused by this command (the id submitCommand returned)"},
				{Name: "after", Description: "cursor: the next value of the previous page"},
				{Name: "limit", Description: fmt.Sprintf("page size, 1-%d, default %d; a page of large events ends at about 4 MiB", s.cfg.PageMax, s.cfg.PageDefault)},
				{Name: "view", Description: "log (the default): events; catalog: the event catalogue (listEventCatalog)", Enum: []string{"log", "catalog"}},
				{Name: "synthetic", Description: "true: list injected (synthetic) events instead of production events", Enum: []string{"true", "false"}},
			}, Handle: s.opListEvents, Stream: s.streamEvents},
		{ID: "listEventCatalog", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Params:  []Param{{Name: "view", Description: "catalog", Required: true, Enum: []string{"catalog"}}},
			Output:  "{events: [catalogue entries]}",
			Summary: "List the event catalogue: the event types agentbus and its processors produce.", Handle: s.opEventCatalog},
		s.injectOperation(),
		{ID: "getEventSchema", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Params:      []Param{schemaParam, versionParam},
			Output:      "the event's JSON Schema document",
			ContentType: "application/schema+json", Errors: []errs.Code{errs.CodeSchemaNotFound},
			Summary: "Get an event's JSON Schema.", Handle: s.opSchema(catalog.KindEvent)},
	}
	all := slices.Concat(ops, s.registryOperations(), s.subscriptionOperations(), s.deliveryOperations())
	for i := range all {
		all[i].door = s.door
	}
	return all
}

var (
	schemaParam  = Param{Name: "schema", Description: "the schema name (kebab-case)", Required: true}
	versionParam = Param{Name: "version", Description: "the schema version (<major>.<minor>)", Required: true}
	idParam      = Param{Name: "id", Description: "the id", Required: true}
)

func (s *Surface) opSubmit(ctx context.Context, r *Request) (*Response, error) {
	acc, err := s.submitAs(ctx, r.Caller, r.Tenant, r.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Outcome: Queued, Body: &Submitted{ID: acc.ID, Status: project.StatusAccepted},
		Location: "/traces/" + acc.ID}, nil
}

// Submitted is the Body of submitCommand's answer.
type Submitted struct {
	// ID is the command's correlation id: its trace's, its events'.
	ID     string `json:"id"`
	Status string `json:"status"` // StatusAccepted
}

// CatalogEntry is the wire form of a catalogue entry.
type CatalogEntry struct {
	Type        string `json:"type"`
	Schema      string `json:"schema"`
	Version     string `json:"version"`
	DataSchema  string `json:"dataschema,omitempty"`
	Description string `json:"description,omitempty"`
}

// CatalogEntries returns the wire form of the command or event catalogue.
func (s *Surface) CatalogEntries(tenant string, kind catalog.Kind) []CatalogEntry {
	list := s.cat.Commands()
	if kind == catalog.KindEvent {
		list = s.cat.Events()
	}
	out := make([]CatalogEntry, len(list))
	for i, e := range list {
		out[i] = CatalogEntry{Type: e.Type, Schema: e.Schema, Version: e.Version, Description: e.Description}
		if e.Typed() {
			out[i].DataSchema = s.cfg.Schemas.Schema(tenant, kind, e)
		}
	}
	return out
}

func (s *Surface) opCommandCatalog(_ context.Context, r *Request) (*Response, error) {
	return &Response{Body: map[string]any{"commands": s.CatalogEntries(r.Tenant, catalog.KindCommand)}}, nil
}

func (s *Surface) opEventCatalog(_ context.Context, r *Request) (*Response, error) {
	if err := onlyParams(r, "view"); err != nil {
		return nil, err
	}
	if v := r.Param("view"); v != "catalog" {
		return nil, errs.Invalid("invalid query parameters", []errs.Violation{{Path: "view", Message: `must be "catalog"`}})
	}
	return &Response{Body: map[string]any{"events": s.CatalogEntries(r.Tenant, catalog.KindEvent)}}, nil
}

// onlyParams refuses a request that carries a parameter other than those
// named.
func onlyParams(r *Request, names ...string) error {
	var v []errs.Violation
	for k := range r.Params {
		if !slices.Contains(names, k) {
			v = append(v, errs.Violation{Path: k, Message: "not taken with view=catalog"})
		}
	}
	if len(v) > 0 {
		slices.SortFunc(v, func(a, b errs.Violation) int { return strings.Compare(a.Path, b.Path) })
		return errs.Invalid("invalid query parameters", v)
	}
	return nil
}

func (s *Surface) opSchema(kind catalog.Kind) func(context.Context, *Request) (*Response, error) {
	return func(_ context.Context, r *Request) (*Response, error) {
		lookup := s.cat.Command
		if kind == catalog.KindEvent {
			lookup = s.cat.Event
		}
		e, ok := lookup(r.Param("schema"), r.Param("version"))
		if !ok || !e.Typed() {
			return nil, errs.New(errs.CodeSchemaNotFound, "no %s schema %s/%s in the catalogue", kind, r.Param("schema"), r.Param("version"))
		}
		return &Response{Raw: e.Doc, ContentType: "application/schema+json"}, nil
	}
}

func (s *Surface) opListEvents(ctx context.Context, r *Request) (*Response, error) {
	switch view := r.Param("view"); view {
	case "catalog":
		return s.opEventCatalog(ctx, r)
	case "", "log":
	default:
		return nil, errs.Invalid("invalid query parameters", []errs.Violation{{Path: "view", Message: `must be "catalog", "log" or omitted`}})
	}
	q, err := s.reads.ParseEventQuery(r.Params["type"], r.Param("correlationId"), r.Param("after"),
		r.Param("limit"), r.Param("synthetic"))
	if err != nil {
		return nil, err
	}
	page, err := s.reads.ListEventsFor(ctx, r.Caller, r.Tenant, q)
	if err != nil {
		return nil, err
	}
	return &Response{Body: page}, nil
}

func (s *Surface) opTrace(ctx context.Context, r *Request) (*Response, error) {
	t, err := s.reads.GetTraceFor(ctx, r.Caller, r.Tenant, r.Param("id"))
	if err != nil {
		return nil, err
	}
	return &Response{Body: t}, nil
}

// parseLimit reads a page size parameter ("" for the default) and appends
// its violation to v.
func (s *Surface) parseLimit(limit string, v []errs.Violation) (int, []errs.Violation) {
	return query.ParseLimit(limit, s.cfg.PageDefault, s.cfg.PageMax, v)
}

// Event injection (POST /events) is for testing and simulation only
// (ingest.Ingest.InjectEvent): off unless Config.AllowInjection is set, and
// it needs the admin scope.
func (s *Surface) injectOperation() Operation {
	op := Operation{ID: "injectEvent", Capability: "events", Scope: ScopeAdmin, Outcomes: []Outcome{Queued},
		Body: &Body{Description: "an event in the message envelope", Schema: EnvelopeSchema()}, Output: "{id: the event id, synthetic: true}",
		Errors: []errs.Code{errs.CodeMalformedJSON, errs.CodeCapabilityNotSupported}, Handle: s.opInject,
		Summary: "Inject a synthetic event (testing and simulation only; needs the admin scope and operator permission)."}
	if !s.cfg.AllowInjection {
		op.Disabled = ingest.InjectionOff
	}
	return op
}

func (s *Surface) opInject(ctx context.Context, r *Request) (*Response, error) {
	id, err := s.in.InjectEvent(ctx, r.Tenant, r.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Outcome: Queued, Body: map[string]any{"id": id, "synthetic": true}}, nil
}
