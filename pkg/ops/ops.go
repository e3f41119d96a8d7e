// Package ops is agentbus's operations table — the one capability surface
// every transport (REST, MCP, A2A), the discovery manifest and the OpenAPI
// document are generated from — and the one door every transport runs an
// operation through (Admit, Call.Invoke). It is transport-neutral: an
// operation has an id, its inputs, its output, the scope it needs and its
// error codes; how a transport exposes it lives with the transport. It
// assembles the table from the handlers of pkg/ops/command (what changes
// something) and pkg/ops/read (what reads), each built by the wiring on
// only what it uses, and serves the live streams itself.
package ops

import (
	"context"
	"time"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops/command"
	"github.com/agentbus/agentbus/pkg/ops/op"
	"github.com/agentbus/agentbus/pkg/ops/read"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/push"
	"github.com/agentbus/agentbus/pkg/pushlog"
	"github.com/agentbus/agentbus/pkg/query"
	"github.com/agentbus/agentbus/pkg/throttle"
)

// Config holds the table's and the live streams' settings. Zero values
// take the defaults noted.
type Config struct {
	// Schemas builds the absolute schema URLs of catalogue entries (Base
	// default "http://127.0.0.1:8080", the public REST endpoint).
	Schemas catalog.URLs
	// PageDefault and PageMax bound pages, as the reads beneath do;
	// default 100 and 1000.
	PageDefault, PageMax int
	// AllowInjection turns on injectEvent (synthetic events; off by
	// default).
	AllowInjection bool
	// Streams bounds the live event streams.
	Streams StreamConfig
	// Middleware wraps every call of every transport (see Middleware),
	// outermost first; none by default.
	Middleware []Middleware
	// Live, when set, is called as each live stream takes its slot
	// (Call.Slot, and Request.Slot for listEvents followed live) with the
	// caller's transport, and the function it returns as the stream ends:
	// a stream refused before that is not counted.
	Live func(transport string) (closed func())
}

func (c *Config) defaults() {
	if c.Schemas.Base == "" {
		c.Schemas.Base = "http://127.0.0.1:8080"
	}
	if c.PageDefault <= 0 {
		c.PageDefault = 100
	}
	if c.PageMax <= 0 {
		c.PageMax = 1000
	}
	c.Streams.defaults()
}

// Ports are the operations' handlers, each built by the wiring on what it
// uses, and what the event reads, the live streams and the followed
// commands read. A table built without them (Ports{}) serves the
// catalogue operations alone, enough for what needs no storage.
type Ports struct {
	// Submit serves submitCommand and injectEvent, and the built-in
	// commands of agentbus's own components (SubmitBuiltin).
	Submit *command.Submit
	// Registry serves the writes of agents, services and subscriptions.
	Registry *command.Registry
	// Delivery serves the actions on a subscription's delivery.
	Delivery *command.Delivery
	// Records serves the reads of agents, services, subscriptions, a
	// subscription's secret and its deliveries.
	Records *read.Registry
	// Reader reads the event log and the traces: listEvents and getTrace
	// are served on it, and so are the live streams.
	Reader *query.Reader
	// Receipts bring a followed command's trace up to date (nil: none).
	Receipts *projection.Receipts
	// Hub hands out the events this replica sees published, for live
	// streams and watched commands; nil serves neither.
	Hub *push.Hub
	// LogEnd tells where the event log ends: a live stream without a
	// cursor starts there (needed with Hub).
	LogEnd LogEnd
	// Pushes records each event a live stream wrote to its listener
	// (pushlog.Log; nil: a store of the default bounds that no other
	// replica hears of).
	Pushes Pushes
}

// Pushes records the pushes of commands' events to live listeners, for
// their traces.
type Pushes interface {
	Add(tenant, corr string, r pushlog.Record)
}

var _ Pushes = (*pushlog.Log)(nil)

// LogEnd tells the sequence of the last event stored in the event log.
type LogEnd interface {
	LastSeq(ctx context.Context) (uint64, error)
}

// Surface is the operations table and what the transports that follow a
// command need beside it. Safe for concurrent use.
type Surface struct {
	cfg     Config
	cat     *catalog.Catalog
	p       Ports
	now     func() time.Time
	catalog *read.Catalog
	events  *read.Events
	reads   *query.Reader
	live    *throttle.Slots // the live streams open
	pushes  Pushes
	door    *door
}

// New returns the operations of cat on the handlers of p.
func New(cfg Config, cat *catalog.Catalog, p Ports) *Surface {
	cfg.defaults()
	s := &Surface{cfg: cfg, cat: cat, p: p, now: time.Now, reads: p.Reader,
		live: throttle.NewSlots(cfg.Streams.Max, cfg.Streams.PerCaller), pushes: p.Pushes}
	if s.pushes == nil {
		s.pushes = noPushes{} // nothing reads them
	}
	s.door = newDoor(cfg.Middleware, s.enterStream, cfg.Live)
	s.catalog = read.NewCatalog(cat, cfg.Schemas)
	s.events = read.NewEvents(p.Reader, p.Receipts, s.catalog)
	return s
}

// Catalog returns the catalogue.
func (s *Surface) Catalog() *catalog.Catalog { return s.cat }

// Reader returns the reads of events and traces the operations serve.
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

// Request is a transport-neutral operation call (op.Request).
type Request = op.Request

// Outcome is how an operation succeeded (op.Outcome).
type Outcome = op.Outcome

// Outcomes.
const (
	Done    = op.Done
	Created = op.Created
	Queued  = op.Queued
	Empty   = op.Empty
)

// Response is a transport-neutral result (op.Response).
type Response = op.Response

// Submitted is the Body of submitCommand's answer.
type Submitted = command.Submitted

// CatalogEntry is the wire form of a catalogue entry.
type CatalogEntry = read.CatalogEntry

// CatalogEntries returns the wire form of the command or event catalogue.
func (s *Surface) CatalogEntries(tenant string, kind catalog.Kind) []CatalogEntry {
	return s.catalog.Entries(tenant, kind)
}

// CallerSource is the envelope source of the commands a caller submits by
// type, over any transport: its credential id ("anonymous" for none),
// under "agentbus/caller/". The same caller and id are the same command
// over MCP and A2A alike.
func CallerSource(caller string) string { return command.CallerSource(caller) }

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

// noPushes is Pushes that records nothing.
type noPushes struct{}

func (noPushes) Add(string, string, pushlog.Record) {}
