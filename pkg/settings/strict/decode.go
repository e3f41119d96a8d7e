package strict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Decode merges the YAML (or JSON) document raw over v, a pointer to a
// struct whose fields are named by their json tags, and changes nothing
// else. Unknown keys and keys in another case than the tag's are errors
// naming the key, one each (errors.Join); so is a value of the wrong type
// or one its field's type refuses (problem). allowed says what a numeric
// setting must be, by its key ("limits.pageMax": "must be 1 to 1024"), ""
// when that is its type's range. A document that is not YAML is the
// parser's own message, with its line.
func Decode(raw []byte, v any, allowed func(key string) string) error {
	// The decoder matches keys whatever their case (encoding/json does);
	// the documented names are the only ones taken.
	var doc any
	if j, err := yaml.YAMLToJSON(raw); err == nil {
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.UseNumber() // numbers as written, for keyProblem
		if dec.Decode(&doc) != nil {
			doc = nil
		} else if err := exactKeys(doc, reflect.TypeOf(v), ""); err != nil {
			return err
		}
	}
	if err := yaml.UnmarshalStrict(raw, v); err != nil {
		return errors.New(problem(err, doc, reflect.TypeOf(v), allowed))
	}
	return nil
}

// exactKeys reports every key of doc, decoded into type t, that names no
// field, or a field only in another case, one error each (errors.Join).
func exactKeys(doc any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := doc.(type) {
	case map[string]any:
		if t.Kind() != reflect.Struct {
			return nil
		}
		var wrong []error
	keys:
		for _, key := range slices.Sorted(maps.Keys(v)) {
			f, ok := Field(t, key)
			if !ok {
				for i := range t.NumField() {
					if name := jsonName(t.Field(i)); strings.EqualFold(name, key) {
						wrong = append(wrong, fmt.Errorf("key %q: did you mean %q? (keys are case-sensitive)", path+key, name))
						continue keys
					}
				}
				wrong = append(wrong, fmt.Errorf("key %q is not a setting (every setting: config/agentbus.example.yaml)", path+key))
				continue
			}
			if err := exactKeys(v[key], f.Type, path+key+"."); err != nil {
				wrong = append(wrong, err)
			}
		}
		return errors.Join(wrong...)
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for _, e := range v {
				if err := exactKeys(e, t.Elem(), path); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Field returns the field of struct type t whose json name is key.
func Field(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); jsonName(f) == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}
