package settings

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/envelope"
)

// fileProblem says what yaml.UnmarshalStrict found wrong with a config
// file, keyed as in the file and without the decoder's words: the YAML
// parser's own message (with its line); for a value of the wrong type,
// envelope.JSONProblem's, with the range Validate allows for a number
// ("limits.pageMax must be an integer, not a string; it must be at least
// 1"); for a value its setting's type refuses (a duration, a size), that
// type's message after the key. doc is the file as decoded JSON, nil when
// it could not be read.
func fileProblem(err error, doc any) string {
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
		if allowed := allowedNumbers(te.Field); allowed != "" {
			_, found, _ := strings.Cut(problem, ", not ")
			kind := "an integer"
			if te.Type != nil && te.Type.Kind() == reflect.Float64 {
				kind = "a number"
			}
			return fmt.Sprintf("%s must be %s, not %s; it %s", te.Field, kind, found, allowed)
		}
		return problem
	}
	if key, kerr := keyProblem(doc, reflect.TypeFor[Config](), ""); kerr != nil {
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
				f, ok := fieldByTag(t, key)
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

// allowedNumbers returns what Validate says the numeric setting at key
// ("limits.pageMax") must be — "must be 1 to 1024" — found by giving it,
// in the default configuration, the lowest and then the highest value its
// type holds; "" when key is no numeric setting or Validate takes both.
func allowedNumbers(key string) string {
	for _, low := range []bool{true, false} {
		c := Default()
		f := reflect.ValueOf(&c).Elem()
		for name := range strings.SplitSeq(key, ".") {
			if f.Kind() != reflect.Struct {
				return ""
			}
			sf, ok := fieldByTag(f.Type(), name)
			if !ok {
				return ""
			}
			f = f.FieldByIndex(sf.Index)
		}
		switch {
		case f.CanInt() && low:
			f.SetInt(math.MinInt64 >> (64 - f.Type().Bits()))
		case f.CanInt():
			f.SetInt(math.MaxInt64 >> (64 - f.Type().Bits()))
		case f.CanFloat() && low:
			f.SetFloat(-math.MaxFloat64)
		case f.CanFloat():
			f.SetFloat(math.MaxFloat64)
		default:
			return ""
		}
		for _, p := range c.Problems() {
			if rest, ok := strings.CutPrefix(p, key); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, ":")) {
				if _, must, ok := strings.Cut(rest, "must "); ok {
					return "must " + must
				}
			}
		}
	}
	return ""
}
