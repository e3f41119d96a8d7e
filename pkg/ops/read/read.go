// Package read is the query side of the operations table (pkg/ops): the
// handlers that answer from the catalogue, the event log and the
// registries and change nothing. Each handler holds only what it reads.
package read

import (
	"context"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops/op"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/query"
)

// Catalog answers the catalogue operations: the command and event
// catalogues and their schemas. Safe for concurrent use.
type Catalog struct {
	cat     *catalog.Catalog
	schemas catalog.URLs
}

// NewCatalog returns the catalogue reads of cat, with its schemas' URLs
// built by schemas.
func NewCatalog(cat *catalog.Catalog, schemas catalog.URLs) *Catalog {
	return &Catalog{cat: cat, schemas: schemas}
}

// CatalogEntry is the wire form of a catalogue entry.
type CatalogEntry struct {
	Type        string `json:"type"`
	Schema      string `json:"schema"`
	Version     string `json:"version"`
	DataSchema  string `json:"dataschema,omitempty"`
	Description string `json:"description,omitempty"`
}

// Entries returns the wire form of the command or event catalogue.
func (c *Catalog) Entries(tenant string, kind catalog.Kind) []CatalogEntry {
	list := c.cat.Commands()
	if kind == catalog.KindEvent {
		list = c.cat.Events()
	}
	out := make([]CatalogEntry, len(list))
	for i, e := range list {
		out[i] = CatalogEntry{Type: e.Type, Schema: e.Schema, Version: e.Version, Description: e.Description}
		if e.Typed() {
			out[i].DataSchema = c.schemas.Schema(tenant, kind, e)
		}
	}
	return out
}

// Commands is listCommandCatalog.
func (c *Catalog) Commands(_ context.Context, r *op.Request) (*op.Response, error) {
	return &op.Response{Body: map[string]any{"commands": c.Entries(r.Tenant, catalog.KindCommand)}}, nil
}

// Events is listEventCatalog.
func (c *Catalog) Events(_ context.Context, r *op.Request) (*op.Response, error) {
	if err := onlyParams(r, "view"); err != nil {
		return nil, err
	}
	if v := r.Param("view"); v != "catalog" {
		return nil, errs.Invalid("invalid query parameters", []errs.Violation{{Path: "view", Message: `must be "catalog"`}})
	}
	return &op.Response{Body: map[string]any{"events": c.Entries(r.Tenant, catalog.KindEvent)}}, nil
}

// onlyParams refuses a request that carries a parameter other than those
// named.
func onlyParams(r *op.Request, names ...string) error {
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

// Schema is getCommandSchema (kind catalog.KindCommand) or getEventSchema.
func (c *Catalog) Schema(kind catalog.Kind) op.Handle {
	return func(_ context.Context, r *op.Request) (*op.Response, error) {
		lookup := c.cat.Command
		if kind == catalog.KindEvent {
			lookup = c.cat.Event
		}
		e, ok := lookup(r.Param("schema"), r.Param("version"))
		if !ok || !e.Typed() {
			return nil, errs.New(errs.CodeSchemaNotFound, "no %s schema %s/%s in the catalogue", kind, r.Param("schema"), r.Param("version"))
		}
		return &op.Response{Raw: e.Doc, ContentType: "application/schema+json"}, nil
	}
}

// Events answers the reads of the event log: its pages and the traces of
// commands. Safe for concurrent use.
type Events struct {
	reads    *query.Reader
	receipts *projection.Receipts
	catalog  *Catalog
}

// NewEvents returns the event reads on reads; receipts (nil: none) bring
// a followed command's trace up to date; listEvents' view=catalog is
// answered by catalog.
func NewEvents(reads *query.Reader, receipts *projection.Receipts, catalog *Catalog) *Events {
	return &Events{reads: reads, receipts: receipts, catalog: catalog}
}

// List is listEvents.
func (e *Events) List(ctx context.Context, r *op.Request) (*op.Response, error) {
	switch view := r.Param("view"); view {
	case "catalog":
		return e.catalog.Events(ctx, r)
	case "", "log":
	default:
		return nil, errs.Invalid("invalid query parameters", []errs.Violation{{Path: "view", Message: `must be "catalog", "log" or omitted`}})
	}
	q, err := e.reads.ParseEventQuery(r.Tenant, r.Params["type"], r.Param("correlationId"), r.Param("after"),
		r.Param("limit"), r.Param("synthetic"))
	if err != nil {
		return nil, err
	}
	page, err := e.reads.ListEventsFor(ctx, r.Caller, r.Tenant, q)
	if err != nil {
		return nil, err
	}
	return &op.Response{Body: page}, nil
}

// Trace is getTrace.
func (e *Events) Trace(ctx context.Context, r *op.Request) (*op.Response, error) {
	t, err := e.reads.GetTraceFor(ctx, r.Caller, r.Tenant, r.Param("id"))
	if err != nil {
		return nil, err
	}
	return &op.Response{Body: t}, nil
}

// CommandTrace returns the trace of tenant's command corr (GetTraceFor,
// bounded as caller's reads), once the receipts projection has caught up
// with the event log as it stood when called, so that a command whose
// events are stored is shown with all of them (they are stored in one
// batch, its receipt updated an event at a time). When the projection
// does not catch up within a few seconds it answers what the receipt
// says (a command processed while it is looked for is found: see
// query.Reader.GetTrace). Errors: those of GetTraceFor
// (TRACE_NOT_FOUND, VALIDATION_FAILED for an id that cannot be one).
func (e *Events) CommandTrace(ctx context.Context, caller, tenant, corr string) (*query.Trace, error) {
	if e.receipts != nil {
		_ = e.receipts.Current(ctx) // best effort: behind, the trace says what it has
	}
	return e.reads.GetTraceFor(ctx, caller, tenant, corr)
}
