package read_test

import (
	"context"
	"slices"
	"testing"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops/op"
	"github.com/agentbus/agentbus/pkg/ops/read"
)

// TestCatalogReads: the catalogue reads need the catalogue alone: the
// entries with their absolute schema URLs, a schema by name and version
// (SCHEMA_NOT_FOUND otherwise), and listEventCatalog refusing every
// parameter but view=catalog, by name; listEvents answers the catalogue
// for view=catalog and refuses another view before it reads the log.
func TestCatalogReads(t *testing.T) {
	t.Parallel()
	cat, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	urls := catalog.URLs{Base: "http://agentbus.test"}
	c := read.NewCatalog(cat, urls)
	ctx := context.Background()
	req := func(params map[string][]string) *op.Request { return &op.Request{Tenant: "default", Params: params} }

	res, err := c.Commands(ctx, req(nil))
	if err != nil {
		t.Fatal(err)
	}
	entries := res.Body.(map[string]any)["commands"].([]read.CatalogEntry)
	i := slices.IndexFunc(entries, func(e read.CatalogEntry) bool { return e.Type == "RegisterAgent" })
	if i < 0 || entries[i].DataSchema == "" ||
		entries[i].DataSchema != urls.Schema("default", catalog.KindCommand, cat.CommandVersions("RegisterAgent")[0]) {
		t.Fatalf("RegisterAgent's entry: %+v", entries)
	}
	schema := c.Schema(catalog.KindCommand)
	if res, err := schema(ctx, req(map[string][]string{"schema": {entries[i].Schema}, "version": {entries[i].Version}})); err != nil ||
		res.ContentType != "application/schema+json" || len(res.Raw) == 0 {
		t.Fatalf("the schema: %+v %v", res, err)
	}
	if _, err := schema(ctx, req(map[string][]string{"schema": {"no-such"}, "version": {"1.0"}})); errs.CodeOf(err) != errs.CodeSchemaNotFound {
		t.Fatalf("an unknown schema: %v", err)
	}

	_, err = c.Events(ctx, req(map[string][]string{"view": {"catalog"}, "type": {"X"}, "after": {"0"}}))
	var paths []string
	for _, v := range errs.As(err).Violations {
		paths = append(paths, v.Path)
	}
	if errs.CodeOf(err) != errs.CodeValidationFailed || !slices.Equal(paths, []string{"after", "type"}) {
		t.Fatalf("listEventCatalog with other parameters: %v at %v", err, paths)
	}

	events := read.NewEvents(nil, nil, c) // no log: what needs none is answered
	if res, err := events.List(ctx, req(map[string][]string{"view": {"catalog"}})); err != nil || res.Body.(map[string]any)["events"] == nil {
		t.Fatalf("listEvents?view=catalog: %+v %v", res, err)
	}
	if _, err := events.List(ctx, req(map[string][]string{"view": {"tables"}})); errs.CodeOf(err) != errs.CodeValidationFailed {
		t.Fatalf("listEvents?view=tables: %v", err)
	}
}
