package rest_test

import (
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/rest"
)

// TestRoutesMatchTheTable: every operation of the table has a route whose
// path parameters are its own, and every route belongs to an operation.
func TestRoutesMatchTheTable(t *testing.T) {
	t.Parallel()
	cat, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	table := ops.New(ops.Config{AllowInjection: true}, cat, ops.Ports{}).Operations()
	eps, err := rest.Bind(table)
	if err != nil {
		t.Fatal(err)
	}
	bound := map[string]bool{}
	for _, ep := range eps {
		bound[ep.ID] = true
	}
	for id := range rest.Routes {
		if !bound[id] {
			t.Errorf("route of %s, which is not an operation", id)
		}
	}
	if _, err := rest.Bind(append(table, ops.Operation{ID: "unroutedThing"})); err == nil || !strings.Contains(err.Error(), "unroutedThing") {
		t.Errorf("an operation without a route was bound: %v", err)
	}
	getAgent := table[0]
	for _, op := range table {
		if op.ID == "getAgent" {
			getAgent = op
		}
	}
	getAgent.Params = nil
	if _, err := rest.Bind([]ops.Operation{getAgent}); err == nil || !strings.Contains(err.Error(), "{id}") {
		t.Errorf("a route naming a parameter the operation lacks was bound: %v", err)
	}
}
