package catalog_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/agentbus/agentbus/pkg/catalog"
)

// boundedSchema has size bounds at the root, under properties and under
// items, and one inside anyOf, which does not always apply.
const boundedSchema = `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","maxProperties":4,
 "properties":{
  "tags":{"type":"array","maxItems":3,"items":{"type":"string","pattern":"^[a-z]+$","maxLength":5}},
  "name":{"type":"string","maxLength":4,"pattern":"^[a-zé]*$"},
  "free":{"type":"array","items":{"type":"string","maxLength":2}},
  "either":{"anyOf":[{"type":"string","maxLength":1},{"type":"integer"}]}},
 "required":["name"],
 "examples":[{"name":"ab","tags":["x"]}]}`

// TestValidateBoundsFirst: data over a size bound of its schema is refused
// for that alone — one violation per bound broken, however many entries
// would break other rules — and never with more than 100 violations;
// within the bounds, every rule is checked as before.
func TestValidateBoundsFirst(t *testing.T) {
	t.Parallel()
	c, err := catalog.Load(fstest.MapFS{
		"catalog.yaml":               {Data: []byte("commands:\n  - {type: DoThing, version: \"1.0\", description: x.}\n")},
		"commands/do-thing/1.0.json": {Data: []byte(boundedSchema)},
		"events/thing-done/1.0.json": {Data: []byte(boundedSchema)},
	})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := c.Command("do-thing", "1.0")
	many := func(n int, item string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
	}
	tests := []struct {
		name, data string
		want       []string // paths, in order
		message    string   // of the first violation, when set
	}{
		{"within bounds, other rules", `{"name":"AB","tags":["x"]}`, []string{"$.data.name"}, "Does not match pattern '^[a-zé]*$'"},
		{"too many items, each invalid", `{"name":"ab","tags":` + many(100_000, `"BAD!"`) + `}`, []string{"$.data.tags"}, "Array must have at most 3 items"},
		{"too many items, name missing", `{"tags":` + many(4, `"a"`) + `}`, []string{"$.data.tags"}, ""},
		{"an item too long", `{"name":"ab","tags":["abcdef","a"]}`, []string{"$.data.tags.0"}, "String length must be less than or equal to 5"},
		{"a long string", `{"name":"` + strings.Repeat("a", 1<<20) + `"}`, []string{"$.data.name"}, "String length must be less than or equal to 4"},
		{"characters, not bytes", `{"name":"ééé"}`, nil, ""},
		{"too many properties", `{"name":"a","b":1,"c":2,"d":3,"e":4}`, []string{"$.data"}, "Must have at most 4 properties"},
		{"anyOf bounds are left to the schema", `{"name":"a","either":"long"}`, []string{"$.data.either", "$.data.either"}, "Must validate at least one schema (anyOf)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := e.Validate([]byte(tt.data))
			var got []string
			for _, x := range v {
				got = append(got, x.Path)
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("paths %q, want %q (%+v)", got, tt.want, v)
			}
			if tt.message != "" && v[0].Message != tt.message {
				t.Errorf("message %q, want %q", v[0].Message, tt.message)
			}
		})
	}
	t.Run("at most 100 violations", func(t *testing.T) {
		t.Parallel()
		v := e.Validate([]byte(`{"name":"a","free":` + many(50_000, `"abc"`) + `}`))
		if len(v) != 100 {
			t.Fatalf("%d violations, want 100", len(v))
		}
	})
}

// TestBuiltinWith: the built-in registration schemas take the configured
// number of accepts and produces entries, in the schema served as in the
// checks; the default is DefaultTypes.
func TestBuiltinWith(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, catalog.DefaultTypes, 8, 1024} {
		c, err := catalog.Load(catalog.BuiltinWith(catalog.BuiltinLimits{Types: n}))
		if err != nil {
			t.Fatalf("types %d: %v", n, err)
		}
		want := n
		if n == 0 {
			want = catalog.DefaultTypes
		}
		for _, schema := range []string{"register-agent", "register-service"} {
			e, _ := c.Command(schema, "1.0")
			var doc struct {
				Properties map[string]struct {
					MaxItems int `json:"maxItems"`
				} `json:"properties"`
			}
			if err := json.Unmarshal(e.Doc, &doc); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"accepts", "produces"} {
				if got := doc.Properties[f].MaxItems; got != want {
					t.Errorf("types %d: %s %s maxItems %d, want %d", n, schema, f, got, want)
				}
				types := make([]string, want+1)
				for i := range types {
					types[i] = fmt.Sprintf("T%d", i)
				}
				data, _ := json.Marshal(map[string]any{"name": "x", f: types[:want]})
				if v := e.Validate(data); len(v) > 0 {
					t.Errorf("types %d: %s with %d %s: %+v", n, schema, want, f, v)
				}
				data, _ = json.Marshal(map[string]any{"name": "x", f: types})
				if v := e.Validate(data); len(v) != 1 || v[0].Path != "$.data."+f {
					t.Errorf("types %d: %s with %d %s: %+v", n, schema, want+1, f, v)
				}
			}
		}
	}
}
