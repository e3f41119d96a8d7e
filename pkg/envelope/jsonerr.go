package envelope

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/errs"
)

// MalformedJSON returns the MALFORMED_JSON error of raw, a body that is not
// one valid JSON value in UTF-8: "the body is not valid JSON: " and what
// JSONProblem says of it.
func MalformedJSON(raw []byte) *errs.Error {
	return errs.New(errs.CodeMalformedJSON, "the body is not valid JSON: %s", JSONProblem(raw, nil))
}

// JSONProblem says what is wrong with raw, which did not decode as JSON
// (err is the decoder's error, or nil), in the sender's terms rather than
// the decoder's:
//
//   - a syntax error (a *json.SyntaxError, io.EOF or io.ErrUnexpectedEOF
//     from a json.Decoder, or a nil err): what was found at which byte of
//     raw (counting from 1) and what was expected there, "unexpected '/' at
//     byte 12; expected a value". It is read from raw itself, so the answer
//     is the same whichever decoder failed;
//   - a value of the wrong type (*json.UnmarshalTypeError): its path and
//     the type it must have, "$.amount must be an integer from 0 to 255,
//     not the number -1";
//   - a property a json.Decoder with DisallowUnknownFields has no field
//     for: "unknown property "name"".
//
// Any other error (a type's own UnmarshalJSON, say) speaks for itself and
// is returned as it is. Safe for concurrent use.
func JSONProblem(raw []byte, err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return typeProblem(te)
	case err == nil || errors.As(err, &se) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return syntaxProblem(raw)
	}
	if name, ok := unknownField(err); ok {
		return "unknown property " + name
	}
	return err.Error()
}

// syntaxProblem describes the first syntax error of raw.
func syntaxProblem(raw []byte) string {
	if i := invalidUTF8(raw); i >= 0 {
		return fmt.Sprintf("invalid UTF-8 at byte %d", i+1)
	}
	if skipSpace(raw, 0) == len(raw) {
		return "it is empty; expected a value"
	}
	var v json.RawMessage
	var se *json.SyntaxError
	if !errors.As(json.Unmarshal(raw, &v), &se) {
		return "it could not be read as JSON" // valid: the caller's decoder failed otherwise
	}
	if se.Offset < 1 || se.Offset > int64(len(raw)) || !strings.HasPrefix(se.Error(), "invalid character ") {
		return fmt.Sprintf("it ends after byte %d, before the value is complete", len(raw))
	}
	r, _ := utf8.DecodeRune(raw[se.Offset-1:])
	found := strconv.QuoteRune(r)
	for _, x := range syntaxContexts {
		if strings.HasSuffix(se.Error(), " "+x.context) {
			return fmt.Sprintf("unexpected %s at byte %d; %s", found, se.Offset, x.expected)
		}
	}
	if _, lit, ok := strings.Cut(se.Error(), " in literal "); ok {
		word, _, _ := strings.Cut(lit, " ")
		return fmt.Sprintf("unexpected %s at byte %d; expected %s", found, se.Offset, word)
	}
	return fmt.Sprintf("unexpected %s at byte %d", found, se.Offset)
}

// syntaxContexts translate the places encoding/json's scanner names in its
// syntax errors ("invalid character 'x' <context>") into what was expected
// there. Longer contexts come first where one ends another.
var syntaxContexts = []struct{ context, expected string }{
	{"looking for beginning of value", "expected a value"},
	{"looking for beginning of object key string", "expected a property name in double quotes"},
	{"after object key:value pair", "expected ',' or '}' after a property's value"},
	{"after object key", "expected ':' after a property name"},
	{"after array element", "expected ',' or ']' after an array element"},
	{"after top-level value", "expected nothing after the JSON value"},
	{"in string literal", `a control character inside a string must be escaped (\n, \t, \u0001, ...)`},
	{"in string escape code", `expected an escape: \" \\ \/ \b \f \n \r \t or \uXXXX`},
	{`in \u hexadecimal character escape`, `expected a hexadecimal digit of \uXXXX`},
	{"after decimal point in numeric literal", "expected a digit after the decimal point"},
	{"in exponent of numeric literal", "expected a digit in the exponent"},
	{"in numeric literal", "expected a digit"},
	{"exceeded max depth", "arrays and objects nest deeper than 10000 levels"},
}

// invalidUTF8 returns the index of the first byte of raw that is not valid
// UTF-8, or -1.
func invalidUTF8(raw []byte) int {
	for i := 0; i < len(raw); {
		r, n := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// unknownField reads err, perhaps wrapped, for the error of a
// json.Decoder with DisallowUnknownFields for a property its target has no
// field for (encoding/json has no error type for it) and returns the
// property's quoted name.
func unknownField(err error) (string, bool) {
	const prefix = "json: unknown field "
	msg := err.Error()
	i := strings.LastIndex(msg, prefix)
	if i < 0 {
		return "", false
	}
	return msg[i+len(prefix):], true
}

// typeProblem describes a JSON value decoded into a Go value of another
// type.
func typeProblem(te *json.UnmarshalTypeError) string {
	path := "$"
	if te.Field != "" {
		path += "." + te.Field
	}
	found := te.Value
	switch {
	case strings.HasPrefix(found, "number "):
		found = "the " + found
	case found == "bool":
		found = "a boolean"
	case found == "array" || found == "object":
		found = "an " + found
	default:
		found = "a " + found
	}
	return fmt.Sprintf("%s must be %s, not %s", path, jsonKind(te.Type), found)
}

// jsonKind names, in JSON's terms, the values a Go type takes.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		return fmt.Sprintf("an integer from %d to %d", int64(-1)<<(bits-1), int64(1)<<(bits-1)-1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fmt.Sprintf("an integer from 0 to %d", uint64(math.MaxUint64)>>(64-t.Bits()))
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another type"
}
