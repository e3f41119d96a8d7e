package ops_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
)

func TestDecodeInput(t *testing.T) {
	op := ops.Operation{ID: "listThings", Params: []ops.Param{
		{Name: "id", Required: true}, {Name: "type", Repeated: true}, {Name: "limit"},
	}}
	withBody := ops.Operation{ID: "putThing", Body: &ops.Body{}}
	for _, tc := range []struct {
		name   string
		op     ops.Operation
		raw    string
		params map[string][]string
		body   string
		paths  []string
	}{
		{name: "strings", op: op, raw: `{"id":"a","type":"X"}`, params: map[string][]string{"id": {"a"}, "type": {"X"}}},
		{name: "numbers as written", op: op, raw: `{"id":"a","limit":1e1,"type":[1.50,true]}`,
			params: map[string][]string{"id": {"a"}, "limit": {"1e1"}, "type": {"1.50", "true"}}},
		{name: "body as given", op: withBody, raw: `{"body": {"n": 1.0, "s":"x"}}`, params: map[string][]string{}, body: `{"n": 1.0, "s":"x"}`},
		{name: "none", op: withBody, raw: ``, paths: []string{"$.body"}},
		{name: "null", op: op, raw: `null`, paths: []string{"$.id"}},
		{name: "not an object", op: op, raw: `[1]`, paths: []string{"$"}},
		{name: "unknown member", op: op, raw: `{"id":"a","where":"1=1"}`, paths: []string{"$.where"}},
		{name: "wrong kinds", op: op, raw: `{"id":["a"],"limit":{"n":1},"type":[["x"]]}`, paths: []string{"$.id", "$.limit", "$.type"}},
		{name: "a member twice", op: op, raw: `{"id":"a","id":"b"}`, paths: []string{"$.id"}},
		{name: "an inexact number", op: op, raw: `{"id":"a","limit":123456789012345678901234567890}`, paths: []string{"$.limit"}},
		{name: "required missing", op: op, raw: `{}`, paths: []string{"$.id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.op.DecodeInput([]byte(tc.raw), "$")
			if tc.paths != nil {
				e := errs.As(err)
				var got []string
				for _, v := range e.Violations {
					got = append(got, v.Path)
				}
				if err == nil || e.Code != errs.CodeValidationFailed || !slices.Equal(got, tc.paths) {
					t.Fatalf("err %v (violations %v), want VALIDATION_FAILED at %v", err, got, tc.paths)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Params, tc.params) || string(r.Body) != tc.body {
				t.Fatalf("params %v body %s, want %v %s", r.Params, r.Body, tc.params, tc.body)
			}
		})
	}
}
