package strict

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/envelope"
)

// problem says what yaml.UnmarshalStrict found wrong with a document
// decoded into type t, keyed as in the file and without the decoder's words: the YAML
// parser's own message (with its line); for a value of the wrong type,
// envelope.JSONProblem's, with the range allowed gives for a number
// ("limits.pageMax must be an integer, not a string; it must be at least
// 1"); for a value its setting's type refuses (a duration, a size), that
// type's message after the key. doc is the file as decoded JSON, nil when
// it could not be read.
func problem(err error, doc any, t reflect.Type, allowed func(key string) string) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "error converting YAML to JSON: "); ok {
		return rest
	}
	if _, ok := strings.CutPrefix(msg, "error unmarshaling JSON: while decoding JSON: "); !ok {
		return msg
	}
	inner := errors.Unwrap(errors.Unwrap(err))
	if inner == nil {
		return msg
	}
	var te *json.UnmarshalTypeError
	if errors.As(inner, &te) {
		problem := strings.TrimPrefix(envelope.JSONProblem(nil, inner), "$.")
		if allowed := allowed(te.Field); allowed != "" {
			_, found, _ := strings.Cut(problem, ", not ")
			kind := "an integer"
			if te.Type != nil && te.Type.Kind() == reflect.Float64 {
				kind = "a number"
			}
			return fmt.Sprintf("%s must be %s, not %s; it %s", te.Field, kind, found, allowed)
		}
		return problem
	}
	if key, kerr := keyProblem(doc, t, ""); kerr != nil {
		return key + ": " + kerr.Error()
	}
	return envelope.JSONProblem(nil, inner)
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// keyProblem returns the key of the first setting of doc, decoded into
// type t, whose type refuses its value (a Duration, a Size, ...), with
// that type's error; nil when there is none. path is doc's key.
func keyProblem(doc any, t reflect.Type, path string) (string, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshaler) {
		raw, err := json.Marshal(doc)
		if err == nil {
			err = json.Unmarshal(raw, reflect.New(t).Interface())
		}
		return path, err
	}
	join := func(key string) string {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	switch v := doc.(type) {
	case map[string]any:
		for _, key := range slices.Sorted(maps.Keys(v)) {
			var ft reflect.Type
			switch t.Kind() {
			case reflect.Struct:
				f, ok := Field(t, key)
				if !ok {
					continue
				}
				ft = f.Type
			case reflect.Map:
				ft = t.Elem()
			default:
				continue
			}
			if k, err := keyProblem(v[key], ft, join(key)); err != nil {
				return k, err
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, e := range v {
				if k, err := keyProblem(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return k, err
				}
			}
		}
	}
	return "", nil
}
