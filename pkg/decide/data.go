package decide

import (
	"encoding/json"
	"reflect"
	"strings"

	"github.com/agentbus/agentbus/pkg/envelope"
)

// DecodeData decodes a command's data into v, a pointer to a struct, as
// the catalogue validated it: a top-level property whose name differs
// from one of v's only in case is left out. The schemas match property
// names exactly and let other properties through, while encoding/json
// matches them regardless of case, so {"accepts":["Ok"],"Accepts":[">"]}
// would otherwise decide on the ">" no schema checked.
func DecodeData(data []byte, v any) error {
	_, _, fields, err := envelope.SplitObject(data)
	if err != nil {
		return json.Unmarshal(data, v) // its own error, as before
	}
	names := jsonNames(reflect.TypeOf(v).Elem())
	dropped := false
	for k := range fields {
		if names[k] {
			continue
		}
		for n := range names {
			if strings.EqualFold(k, n) {
				delete(fields, k)
				dropped = true
				break
			}
		}
	}
	if dropped {
		data = MustJSON(fields)
	}
	return json.Unmarshal(data, v)
}

// jsonNames returns the JSON names of struct type t's fields.
func jsonNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	return names
}
