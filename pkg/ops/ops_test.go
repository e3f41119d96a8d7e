package ops_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/ops"
)

// TestOperationsDescribeThemselves: every operation of the table has an
// id, a capability, a summary, a scope, an outcome and a handler, and its
// input schema names each of its parameters and its body.
func TestOperationsDescribeThemselves(t *testing.T) {
	t.Parallel()
	cat, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	table := ops.New(ops.Config{}, cat, ops.Ports{}).Operations()
	seen := map[string]bool{}
	for _, op := range table {
		if op.ID == "" || seen[op.ID] || op.Capability == "" || op.Summary == "" || op.Scope == "" || len(op.Outcomes) == 0 || op.Handle == nil {
			t.Errorf("%+v: incomplete or repeated", op)
		}
		seen[op.ID] = true
		in := op.InputSchema()
		if _, err := json.Marshal(in); err != nil {
			t.Errorf("%s: input schema: %v", op.ID, err)
		}
		props := in["properties"].(map[string]any)
		required := in["required"].([]string)
		for _, p := range op.Params {
			if props[p.Name] == nil || p.Required != slices.Contains(required, p.Name) {
				t.Errorf("%s: parameter %s: %v, required %v", op.ID, p.Name, props[p.Name], required)
			}
		}
		if (op.Body != nil) != (props["body"] != nil) || (op.Body != nil) != slices.Contains(required, "body") {
			t.Errorf("%s: body %v, schema %v", op.ID, op.Body, props["body"])
		}
		if op.Body != nil && op.Body.Schema == nil {
			t.Errorf("%s: a body without a schema", op.ID)
		}
	}
	for _, id := range []string{"submitCommand", "listEventCatalog", "registerAgent", "getTrace"} {
		if !seen[id] {
			t.Errorf("operation %s missing", id)
		}
	}
}
