package app

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/errs"
)

// Scope is the permission an operation needs.
type Scope string

// Scopes a credential can carry.
const (
	ScopeRead  Scope = "read"
	ScopeWrite Scope = "write"
	ScopeAdmin Scope = "admin"
)

// Param documents one query parameter of an operation.
type Param struct {
	Name        string
	Description string
	Repeated    bool
}

// Request is a transport-neutral operation call.
type Request struct {
	Tenant string
	Path   map[string]string   // path parameters by name
	Query  map[string][]string // query parameters
	Body   []byte
}

// Response is a transport-neutral result. Body is marshalled as JSON unless
// Raw is set, which is sent as is with ContentType.
type Response struct {
	Status      int // HTTP-style success status: 200, 201, 202, 204
	Body        any
	Raw         []byte
	ContentType string
	Location    string // path of the created or tracked resource, relative to the tenant base
}

// Operation is one entry of the operations table: the single capability
// surface every transport, the manifest and the OpenAPI document are
// generated from.
type Operation struct {
	ID          string
	Capability  string // manifest capability it belongs to
	Method      string
	Path        string // relative to the (tenant) base, "{name}" for parameters
	Summary     string
	Scope       Scope
	Params      []Param
	HasBody     bool
	Success     int
	ContentType string // of a successful response; default application/json
	// Disabled, when set, says why configuration switched the operation
	// off: it answers CAPABILITY_NOT_SUPPORTED (before any scope check) and
	// is left out of the manifest's endpoints and the OpenAPI document.
	Disabled string
	Handle   func(ctx context.Context, r *Request) (*Response, error)
}

// Operations returns the operations table.
func (a *App) Operations() []Operation {
	ops := []Operation{
		{ID: "submitCommand", Capability: "commands", Method: http.MethodPost, Path: "/commands", Scope: ScopeWrite, HasBody: true, Success: 202,
			Summary: "Submit a command in the message envelope; returns its correlation id.", Handle: a.opSubmit},
		{ID: "listCommandCatalog", Capability: "commands", Method: http.MethodGet, Path: "/commands", Scope: ScopeRead, Success: 200,
			Summary: "List the command catalogue.", Handle: a.opCommandCatalog},
		{ID: "getCommandSchema", Capability: "commands", Method: http.MethodGet, Path: "/commands/{schema}/{version}", Scope: ScopeRead, Success: 200,
			ContentType: "application/schema+json", Summary: "Get a command's JSON Schema.", Handle: a.opSchema(catalog.KindCommand)},
		{ID: "listEvents", Capability: "events", Method: http.MethodGet, Path: "/events", Scope: ScopeRead, Success: 200,
			Summary: "List events in stream order, or the event catalogue with view=catalog.",
			Params: []Param{
				{Name: "type", Description: "event type to include (repeatable)", Repeated: true},
				{Name: "correlationId", Description: "only events caused by this command (the id POST /commands returned)"},
				{Name: "after", Description: "cursor: the next value of the previous page"},
				{Name: "limit", Description: "page size, 1-1000, default 100; a page of large events ends at about 4 MiB"},
				{Name: "view", Description: "catalog: return the event catalogue instead of events"},
				{Name: "synthetic", Description: "true: list injected (synthetic) events instead of production events"},
			}, Handle: a.opListEvents},
		a.injectOperation(),
		{ID: "getEventSchema", Capability: "events", Method: http.MethodGet, Path: "/events/{schema}/{version}", Scope: ScopeRead, Success: 200,
			ContentType: "application/schema+json", Summary: "Get an event's JSON Schema.", Handle: a.opSchema(catalog.KindEvent)},
	}
	ops = append(ops, a.registryOperations()...)
	return ops
}

func (a *App) opSubmit(ctx context.Context, r *Request) (*Response, error) {
	acc, err := a.SubmitCommand(ctx, r.Tenant, r.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Status: 202, Body: map[string]string{"id": acc.ID, "status": StatusAccepted},
		Location: "/traces/" + acc.ID}, nil
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
func (a *App) CatalogEntries(tenant string, kind catalog.Kind) []CatalogEntry {
	list := a.cat.Commands()
	if kind == catalog.KindEvent {
		list = a.cat.Events()
	}
	out := make([]CatalogEntry, len(list))
	for i, e := range list {
		out[i] = CatalogEntry{Type: e.Type, Schema: e.Schema, Version: e.Version, Description: e.Description}
		if e.Typed() {
			out[i].DataSchema = a.SchemaURL(tenant, kind, e)
		}
	}
	return out
}

func (a *App) opCommandCatalog(_ context.Context, r *Request) (*Response, error) {
	return &Response{Status: 200, Body: map[string]any{"commands": a.CatalogEntries(r.Tenant, catalog.KindCommand)}}, nil
}

func (a *App) opSchema(kind catalog.Kind) func(context.Context, *Request) (*Response, error) {
	return func(_ context.Context, r *Request) (*Response, error) {
		lookup := a.cat.Command
		if kind == catalog.KindEvent {
			lookup = a.cat.Event
		}
		e, ok := lookup(r.Path["schema"], r.Path["version"])
		if !ok || !e.Typed() {
			return nil, errs.New(errs.CodeSchemaNotFound, "no %s schema %s/%s in the catalogue", kind, r.Path["schema"], r.Path["version"])
		}
		return &Response{Status: 200, Raw: e.Doc, ContentType: "application/schema+json"}, nil
	}
}

func first(q map[string][]string, k string) string {
	if v := q[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (a *App) opListEvents(ctx context.Context, r *Request) (*Response, error) {
	switch view := first(r.Query, "view"); view {
	case "catalog":
		var v []errs.Violation
		for k := range r.Query {
			if k != "view" {
				v = append(v, errs.Violation{Path: k, Message: "not taken with view=catalog"})
			}
		}
		if len(v) > 0 {
			slices.SortFunc(v, func(a, b errs.Violation) int { return strings.Compare(a.Path, b.Path) })
			return nil, errs.Invalid("invalid query parameters", v)
		}
		return &Response{Status: 200, Body: map[string]any{"events": a.CatalogEntries(r.Tenant, catalog.KindEvent)}}, nil
	case "", "log":
	default:
		return nil, errs.Invalid("invalid query parameters", []errs.Violation{{Path: "view", Message: `must be "catalog" or omitted`}})
	}
	q, err := a.ParseEventQuery(r.Query["type"], first(r.Query, "correlationId"), first(r.Query, "after"),
		first(r.Query, "limit"), first(r.Query, "synthetic"))
	if err != nil {
		return nil, err
	}
	page, err := a.ListEvents(ctx, r.Tenant, q)
	if err != nil {
		return nil, err
	}
	return &Response{Status: 200, Body: page}, nil
}
