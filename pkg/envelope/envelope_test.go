package envelope_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// validCommand returns the members of a valid command envelope; tests
// change one member at a time.
func validCommand() map[string]any {
	return map[string]any{
		"specversion":     "1.0",
		"id":              "cmd-1",
		"source":          "urn:test",
		"type":            "PlaceOrder",
		"datacontenttype": "application/json",
		"dataschema":      "place-order/1.0",
		"time":            "2026-01-02T15:04:05Z",
		"data":            map[string]any{"orderId": "o-1"},
	}
}

func validEvent() map[string]any {
	m := validCommand()
	m["type"] = "OrderPlaced"
	m["dataschema"] = "http://127.0.0.1:8080/events/order-placed/1.0"
	return m
}

func marshal(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func with(m map[string]any, k string, v any) map[string]any {
	m[k] = v
	return m
}

func without(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		delete(m, k)
	}
	return m
}

// violationPaths returns the paths of a VALIDATION_FAILED error, failing
// the test on any other outcome.
func violationPaths(t *testing.T, err error) []string {
	t.Helper()
	var e *errs.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *errs.Error, got %T %v", err, err)
	}
	if e.Code != errs.CodeValidationFailed {
		t.Fatalf("code = %s, want %s (%v)", e.Code, errs.CodeValidationFailed, err)
	}
	var paths []string
	for _, v := range e.Violations {
		if v.Message == "" {
			t.Errorf("violation %s has no message", v.Path)
		}
		paths = append(paths, v.Path)
	}
	slices.Sort(paths)
	return paths
}

func TestDecodeValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		kind envelope.Kind
		raw  []byte
		want envelope.Envelope
	}{
		{
			name: "command",
			kind: envelope.Command,
			raw:  marshal(t, validCommand()),
			want: envelope.Envelope{SpecVersion: "1.0", ID: "cmd-1", Source: "urn:test", Type: "PlaceOrder",
				DataContentType: "application/json", DataSchema: "place-order/1.0", Time: "2026-01-02T15:04:05Z",
				Data: json.RawMessage(`{"orderId":"o-1"}`)},
		},
		{
			name: "typed event with absolute dataschema",
			kind: envelope.Event,
			raw:  marshal(t, validEvent()),
			want: envelope.Envelope{SpecVersion: "1.0", ID: "cmd-1", Source: "urn:test", Type: "OrderPlaced",
				DataContentType: "application/json", DataSchema: "http://127.0.0.1:8080/events/order-placed/1.0",
				Time: "2026-01-02T15:04:05Z", Data: json.RawMessage(`{"orderId":"o-1"}`)},
		},
		{
			name: "untyped event without dataschema",
			kind: envelope.Event,
			raw:  marshal(t, without(validEvent(), "dataschema")),
			want: envelope.Envelope{SpecVersion: "1.0", ID: "cmd-1", Source: "urn:test", Type: "OrderPlaced",
				DataContentType: "application/json", Time: "2026-01-02T15:04:05Z", Data: json.RawMessage(`{"orderId":"o-1"}`)},
		},
		{
			name: "whitespace, fractional seconds, offset, non-URI source, extra data properties",
			kind: envelope.Command,
			raw: []byte(" \n{ \"specversion\" : \"1.0\", \"id\": \"550e8400-e29b-41d4-a716-446655440000\", \"source\": \"billing worker #3\"," +
				" \"type\": \"AddNote\", \"datacontenttype\": \"application/json\", \"dataschema\": \"add-note/12.34\"," +
				" \"time\": \"2026-01-02T15:04:05.123456789+02:00\", \"data\" :  {\"text\": \"x\", \"extra\": [1, {}]} }\n"),
			want: envelope.Envelope{SpecVersion: "1.0", ID: "550e8400-e29b-41d4-a716-446655440000", Source: "billing worker #3",
				Type: "AddNote", DataContentType: "application/json", DataSchema: "add-note/12.34",
				Time: "2026-01-02T15:04:05.123456789+02:00", Data: json.RawMessage(`{"text": "x", "extra": [1, {}]}`)},
		},
		{
			name: "empty data object",
			kind: envelope.Command,
			raw:  marshal(t, with(validCommand(), "data", map[string]any{})),
			want: envelope.Envelope{SpecVersion: "1.0", ID: "cmd-1", Source: "urn:test", Type: "PlaceOrder",
				DataContentType: "application/json", DataSchema: "place-order/1.0", Time: "2026-01-02T15:04:05Z",
				Data: json.RawMessage(`{}`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, err := envelope.Decode(tt.raw, tt.kind)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if string(env.Data) != string(tt.want.Data) {
				t.Errorf("Data = %s, want %s", env.Data, tt.want.Data)
			}
			got, want := *env, tt.want
			got.Data, want.Data = nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Decode = %+v, want %+v", got, want)
			}
		})
	}
}

func TestDecodeViolations(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name  string
		kind  envelope.Kind
		raw   []byte
		paths []string // every violation path, sorted
	}{
		// Each required member missing on its own.
		{"missing specversion", envelope.Command, marshal(t, without(validCommand(), "specversion")), []string{"$.specversion"}},
		{"missing id", envelope.Command, marshal(t, without(validCommand(), "id")), []string{"$.id"}},
		{"missing source", envelope.Command, marshal(t, without(validCommand(), "source")), []string{"$.source"}},
		{"missing type", envelope.Command, marshal(t, without(validCommand(), "type")), []string{"$.type"}},
		{"missing datacontenttype", envelope.Command, marshal(t, without(validCommand(), "datacontenttype")), []string{"$.datacontenttype"}},
		{"missing dataschema on a command", envelope.Command, marshal(t, without(validCommand(), "dataschema")), []string{"$.dataschema"}},
		{"missing time", envelope.Command, marshal(t, without(validCommand(), "time")), []string{"$.time"}},
		{"missing data", envelope.Command, marshal(t, without(validCommand(), "data")), []string{"$.data"}},
		{"missing data on an event", envelope.Event, marshal(t, without(validEvent(), "data")), []string{"$.data"}},
		{"missing time on an event", envelope.Event, marshal(t, without(validEvent(), "time")), []string{"$.time"}},
		{"empty object", envelope.Command, []byte(`{}`), []string{"$.data", "$.datacontenttype", "$.dataschema", "$.id", "$.source", "$.specversion", "$.time", "$.type"}},
		{"empty event object", envelope.Event, []byte(`{}`), []string{"$.data", "$.datacontenttype", "$.id", "$.source", "$.specversion", "$.time", "$.type"}},

		// Additional top-level properties.
		{"extra property", envelope.Command, marshal(t, with(validCommand(), "extra", 1)), []string{"$.extra"}},
		{"CloudEvents extension subject", envelope.Event, marshal(t, with(validEvent(), "subject", "x")), []string{"$.subject"}},
		{"case-different member", envelope.Command, marshal(t, with(validCommand(), "ID", "x")), []string{"$.ID"}},

		// specversion.
		{"specversion 0.3", envelope.Command, marshal(t, with(validCommand(), "specversion", "0.3")), []string{"$.specversion"}},
		{"specversion 1.0.0", envelope.Command, marshal(t, with(validCommand(), "specversion", "1.0.0")), []string{"$.specversion"}},
		{"specversion a number", envelope.Command, marshal(t, with(validCommand(), "specversion", 1.0)), []string{"$.specversion"}},
		{"specversion null", envelope.Command, marshal(t, with(validCommand(), "specversion", nil)), []string{"$.specversion"}},
		{"id null", envelope.Command, marshal(t, with(validCommand(), "id", nil)), []string{"$.id"}},
		{"source null", envelope.Command, marshal(t, with(validCommand(), "source", nil)), []string{"$.source"}},
		{"type null", envelope.Command, marshal(t, with(validCommand(), "type", nil)), []string{"$.type"}},
		{"datacontenttype null", envelope.Command, marshal(t, with(validCommand(), "datacontenttype", nil)), []string{"$.datacontenttype"}},
		{"dataschema null on a command", envelope.Command, marshal(t, with(validCommand(), "dataschema", nil)), []string{"$.dataschema"}},
		{"dataschema null on an event", envelope.Event, marshal(t, with(validEvent(), "dataschema", nil)), []string{"$.dataschema"}},
		{"time null", envelope.Command, marshal(t, with(validCommand(), "time", nil)), []string{"$.time"}},
		{"all strings null", envelope.Event, []byte(`{"specversion":null,"id":null,"source":null,"type":null,"datacontenttype":null,"time":null,"data":{}}`),
			[]string{"$.datacontenttype", "$.id", "$.source", "$.specversion", "$.time", "$.type"}},

		// datacontenttype.
		{"datacontenttype text/plain", envelope.Command, marshal(t, with(validCommand(), "datacontenttype", "text/plain")), []string{"$.datacontenttype"}},
		{"datacontenttype with charset", envelope.Command, marshal(t, with(validCommand(), "datacontenttype", "application/json; charset=utf-8")), []string{"$.datacontenttype"}},
		{"datacontenttype upper case", envelope.Command, marshal(t, with(validCommand(), "datacontenttype", "Application/JSON")), []string{"$.datacontenttype"}},
		{"datacontenttype empty", envelope.Event, marshal(t, with(validEvent(), "datacontenttype", "")), []string{"$.datacontenttype"}},

		// id and source.
		{"empty id", envelope.Command, marshal(t, with(validCommand(), "id", "")), []string{"$.id"}},
		{"blank id", envelope.Command, marshal(t, with(validCommand(), "id", "  \t ")), []string{"$.id"}},
		{"id with a newline", envelope.Command, marshal(t, with(validCommand(), "id", "a\nb")), []string{"$.id"}},
		{"id too long", envelope.Command, marshal(t, with(validCommand(), "id", long(envelope.MaxIDLen+1))), []string{"$.id"}},
		{"id a number", envelope.Command, marshal(t, with(validCommand(), "id", 7)), []string{"$.id"}},
		{"empty source", envelope.Command, marshal(t, with(validCommand(), "source", "")), []string{"$.source"}},
		{"source with DEL", envelope.Event, marshal(t, with(validEvent(), "source", "a\x7fb")), []string{"$.source"}},
		{"source too long", envelope.Command, marshal(t, with(validCommand(), "source", long(envelope.MaxSourceLen+1))), []string{"$.source"}},
		{"source an object", envelope.Command, marshal(t, with(validCommand(), "source", map[string]any{})), []string{"$.source"}},

		// type.
		{"type camelCase", envelope.Command, marshal(t, with(validCommand(), "type", "placeOrder")), []string{"$.type"}},
		{"type kebab-case", envelope.Command, marshal(t, with(validCommand(), "type", "place-order")), []string{"$.type"}},
		{"type with underscore", envelope.Command, marshal(t, with(validCommand(), "type", "Place_Order")), []string{"$.type"}},
		{"type with dot", envelope.Event, marshal(t, with(validEvent(), "type", "Order.Placed")), []string{"$.type"}},
		{"type reverse-DNS", envelope.Event, marshal(t, with(validEvent(), "type", "com.example.OrderPlaced")), []string{"$.type"}},
		{"type empty", envelope.Command, marshal(t, with(validCommand(), "type", "")), []string{"$.type"}},
		{"type too long", envelope.Command, marshal(t, with(validCommand(), "type", "A"+long(envelope.MaxTypeLen))), []string{"$.type"}},

		// dataschema.
		{"dataschema absolute URI", envelope.Command, marshal(t, with(validCommand(), "dataschema", "http://127.0.0.1:8080/commands/place-order/1.0")), []string{"$.dataschema"}},
		{"dataschema rooted path", envelope.Command, marshal(t, with(validCommand(), "dataschema", "/commands/place-order/1.0")), []string{"$.dataschema"}},
		{"dataschema with commands segment", envelope.Command, marshal(t, with(validCommand(), "dataschema", "commands/place-order/1.0")), []string{"$.dataschema"}},
		{"dataschema version without minor", envelope.Command, marshal(t, with(validCommand(), "dataschema", "place-order/1")), []string{"$.dataschema"}},
		{"dataschema v-prefixed version", envelope.Command, marshal(t, with(validCommand(), "dataschema", "place-order/v1.0")), []string{"$.dataschema"}},
		{"dataschema PascalCase name", envelope.Command, marshal(t, with(validCommand(), "dataschema", "PlaceOrder/1.0")), []string{"$.dataschema"}},
		{"dataschema trailing slash", envelope.Command, marshal(t, with(validCommand(), "dataschema", "place-order/1.0/")), []string{"$.dataschema"}},
		{"dataschema empty on a command", envelope.Command, marshal(t, with(validCommand(), "dataschema", "")), []string{"$.dataschema"}},
		{"dataschema empty on an event", envelope.Event, marshal(t, with(validEvent(), "dataschema", "")), []string{"$.dataschema"}},
		{"dataschema a number", envelope.Event, marshal(t, with(validEvent(), "dataschema", 1)), []string{"$.dataschema"}},

		// time.
		{"time a date", envelope.Command, marshal(t, with(validCommand(), "time", "2026-01-02")), []string{"$.time"}},
		{"time without zone", envelope.Command, marshal(t, with(validCommand(), "time", "2026-01-02T15:04:05")), []string{"$.time"}},
		{"time with a space", envelope.Command, marshal(t, with(validCommand(), "time", "2026-01-02 15:04:05Z")), []string{"$.time"}},
		{"time month 13", envelope.Command, marshal(t, with(validCommand(), "time", "2026-13-02T15:04:05Z")), []string{"$.time"}},
		{"time words", envelope.Command, marshal(t, with(validCommand(), "time", "yesterday")), []string{"$.time"}},
		{"time unix seconds", envelope.Command, marshal(t, with(validCommand(), "time", 1767366245)), []string{"$.time"}},

		// data.
		{"data an array", envelope.Command, marshal(t, with(validCommand(), "data", []any{1})), []string{"$.data"}},
		{"data a string", envelope.Command, marshal(t, with(validCommand(), "data", "{}")), []string{"$.data"}},
		{"data null", envelope.Command, marshal(t, with(validCommand(), "data", nil)), []string{"$.data"}},
		{"data a number", envelope.Event, marshal(t, with(validEvent(), "data", 1)), []string{"$.data"}},

		// Several at once: every one is listed.
		{"several violations", envelope.Command, marshal(t, with(with(with(without(validCommand(), "id"), "time", "noon"), "extra", true), "type", "x")),
			[]string{"$.extra", "$.id", "$.time", "$.type"}},

		// Duplicate members, which encoding/json would silently merge.
		{"duplicate id", envelope.Command, []byte(`{"specversion":"1.0","id":"a","id":"b","source":"s","type":"PlaceOrder","datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-02T15:04:05Z","data":{}}`), []string{"$.id"}},
		{"duplicate data", envelope.Command, []byte(`{"specversion":"1.0","id":"a","source":"s","type":"PlaceOrder","datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-02T15:04:05Z","data":{},"data":{"x":1}}`), []string{"$.data"}},
		{"duplicate by escape", envelope.Command, []byte(`{"specversion":"1.0","id":"a","source":"s","type":"PlaceOrder","\u0074ype":"PlaceOrder","datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-02T15:04:05Z","data":{}}`), []string{"$.type"}},

		// Half a surrogate pair decodes to U+FFFD, like "\ufffd" itself:
		// two ids would name one command.
		{"lone high surrogate in id", envelope.Command, rawCommand(`"a\ud800"`, `"s"`), []string{"$.id"}},
		{"lone low surrogate in source", envelope.Command, rawCommand(`"a"`, `"\udc00s"`), []string{"$.source"}},
		{"high surrogate then a letter", envelope.Command, rawCommand(`"\uD83Dx"`, `"s"`), []string{"$.id"}},
		{"two high surrogates", envelope.Command, rawCommand(`"\ud83d\ud83d"`, `"s"`), []string{"$.id"}},

		// Not an object at all.
		{"array", envelope.Command, []byte(`[]`), []string{"$"}},
		{"string", envelope.Command, []byte(`"x"`), []string{"$"}},
		{"null", envelope.Command, []byte(`null`), []string{"$"}},
		{"number", envelope.Event, []byte(` 12 `), []string{"$"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, err := envelope.Decode(tt.raw, tt.kind)
			if err == nil {
				t.Fatalf("Decode accepted %s as %+v", tt.raw, env)
			}
			if env != nil {
				t.Errorf("Decode returned an envelope with an error")
			}
			if got := violationPaths(t, err); !slices.Equal(got, tt.paths) {
				t.Errorf("violation paths = %q, want %q", got, tt.paths)
			}
		})
	}
}

// TestDecodeMalformed: a body that is not JSON is MALFORMED_JSON, and the
// message says, in the sender's terms and not the decoder's, what is
// wrong at which byte (counting from 1) and what was expected there.
func TestDecodeMalformed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  string
		msg  string // after "the body is not valid JSON: "
	}{
		{"empty", "", "it is empty; expected a value"},
		{"blank", "  \n", "it is empty; expected a value"},
		{"open brace", "{", "it ends after byte 1, before the value is complete"},
		{"missing value", `{"id":}`, "unexpected '}' at byte 7; expected a value"},
		{"comment", `{"id": "x", /* note */ "source": "s"}`, "unexpected '/' at byte 13; expected a property name in double quotes"},
		{"missing colon", `{"id" "x"}`, `unexpected '"' at byte 7; expected ':' after a property name`},
		{"number key", `{1:2}`, "unexpected '1' at byte 2; expected a property name in double quotes"},
		{"trailing comma", `{"id":"x",}`, "unexpected '}' at byte 11; expected a property name in double quotes"},
		{"missing comma", `{"id":"x" "source":"s"}`, `unexpected '"' at byte 11; expected ',' or '}' after a property's value`},
		{"single quotes", `{'id':'x'}`, `unexpected '\'' at byte 2; expected a property name in double quotes`},
		{"unterminated string", `{"id":"x`, "it ends after byte 8, before the value is complete"},
		{"raw newline in a string", "{\"id\":\"a\nb\"}", `unexpected '\n' at byte 9; a control character inside a string must be escaped (\n, \t, \u0001, ...)`},
		{"bad escape", `{"id":"a\qb"}`, `unexpected 'q' at byte 10; expected an escape: \" \\ \/ \b \f \n \r \t or \uXXXX`},
		{"bad unicode escape", `{"id":"\u12g4"}`, `unexpected 'g' at byte 12; expected a hexadecimal digit of \uXXXX`},
		{"trailing garbage", `{"id":"x"}x`, "unexpected 'x' at byte 11; expected nothing after the JSON value"},
		{"two objects", `{"id":"x"}{"id":"y"}`, "unexpected '{' at byte 11; expected nothing after the JSON value"},
		{"object then array", `{}[]`, "unexpected '[' at byte 3; expected nothing after the JSON value"},
		{"broken nested data", `{"data":{"a":[1,}}`, "unexpected '}' at byte 17; expected a value"},
		{"unclosed array", `{"data":{"a":[1 2]}}`, "unexpected '2' at byte 17; expected ',' or ']' after an array element"},
		{"invalid UTF-8", "{\"id\":\"\xff\"}", "invalid UTF-8 at byte 8"},
		{"NaN", `{"data":{"a":NaN}}`, "unexpected 'N' at byte 14; expected a value"},
		{"misspelt true", `{"data":{"a":tru}}`, "unexpected '}' at byte 17; expected true"},
		{"number", `{"data":{"a":1.}}`, "unexpected '}' at byte 16; expected a digit after the decimal point"},
		{"exponent", `{"data":{"a":1e}}`, "unexpected '}' at byte 16; expected a digit in the exponent"},
		{"minus", `{"data":{"a":-}}`, "unexpected '}' at byte 15; expected a digit"},
		{"non-ASCII", `{"id":"x"}é`, "unexpected 'é' at byte 11; expected nothing after the JSON value"},
		{"too deep", `{"data":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, "unexpected '[' at byte 10008; arrays and objects nest deeper than 10000 levels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, kind := range []envelope.Kind{envelope.Command, envelope.Event} {
				_, err := envelope.Decode([]byte(tt.raw), kind)
				if got := errs.CodeOf(err); got != errs.CodeMalformedJSON {
					t.Errorf("kind %d: code = %q, want %s (err %v)", kind, got, errs.CodeMalformedJSON, err)
				}
				if got, want := errs.As(err).Message, "the body is not valid JSON: "+tt.msg; got != want {
					t.Errorf("kind %d: message\n  %s\nwant\n  %s", kind, got, want)
				}
			}
			_, _, _, err := envelope.SplitObject([]byte(tt.raw))
			if got, want := errs.As(err).Message, "the body is not valid JSON: "+tt.msg; got != want {
				t.Errorf("SplitObject: message\n  %s\nwant\n  %s", got, want)
			}
		})
	}
}

// TestJSONProblemTypes: a value of the wrong type is named by its path and
// the type it must have, in JSON's words.
func TestJSONProblemTypes(t *testing.T) {
	t.Parallel()
	var in struct {
		Name   string `json:"name"`
		Amount int64  `json:"amount"`
		Count  uint8  `json:"count"`
		Tags   []string
		Nested struct {
			On bool `json:"on"`
		} `json:"nested"`
	}
	for _, tt := range []struct{ raw, want string }{
		{`{"name":5}`, "$.name must be a string, not a number"},
		{`{"amount":1e30}`, "$.amount must be an integer from -9223372036854775808 to 9223372036854775807, not the number 1e30"},
		{`{"amount":"5"}`, "$.amount must be an integer from -9223372036854775808 to 9223372036854775807, not a string"},
		{`{"count":-1}`, "$.count must be an integer from 0 to 255, not the number -1"},
		{`{"Tags":{}}`, "$.Tags must be an array, not an object"},
		{`{"nested":{"on":"yes"}}`, "$.nested.on must be true or false, not a string"},
		{`{"nested":[]}`, "$.nested must be an object, not an array"},
		{`{"name":true}`, "$.name must be a string, not a boolean"},
		{`[1]`, "$ must be an object, not an array"},
	} {
		err := json.Unmarshal([]byte(tt.raw), &in)
		if err == nil {
			t.Fatalf("%s decoded", tt.raw)
		}
		if got := envelope.JSONProblem([]byte(tt.raw), err); got != tt.want {
			t.Errorf("%s:\n  %s\nwant\n  %s", tt.raw, got, tt.want)
		}
	}
	dec := json.NewDecoder(strings.NewReader(`{"name":"n","bogus":1}`))
	dec.DisallowUnknownFields()
	if got, want := envelope.JSONProblem(nil, fmt.Errorf("decoding: %w", dec.Decode(&in))), `unknown property "bogus"`; got != want {
		t.Errorf("unknown field: %q, want %q", got, want)
	}
	if got, want := envelope.JSONProblem(nil, errors.New(`invalid duration "x"`)), `invalid duration "x"`; got != want {
		t.Errorf("an UnmarshalJSON's own error: %q, want %q", got, want)
	}
	// A syntax error is described the same whichever decoder met it.
	raw := []byte(`{"name": /}`)
	want := "unexpected '/' at byte 10; expected a value"
	if got := envelope.JSONProblem(raw, json.Unmarshal(raw, &in)); got != want {
		t.Errorf("json.Unmarshal: %q, want %q", got, want)
	}
	if got := envelope.JSONProblem(raw, json.NewDecoder(bytes.NewReader(raw)).Decode(&in)); got != want {
		t.Errorf("json.Decoder: %q, want %q", got, want)
	}
	if got := envelope.JSONProblem(raw, nil); got != want {
		t.Errorf("no error: %q, want %q", got, want)
	}
}

// TestDecodeCommandRules pins what a command needs that an event does not.
func TestDecodeCommandRules(t *testing.T) {
	t.Parallel()
	abs := marshal(t, validEvent()) // absolute dataschema
	if _, err := envelope.Decode(abs, envelope.Event); err != nil {
		t.Fatalf("event with absolute dataschema: %v", err)
	}
	cmd := marshal(t, with(validEvent(), "type", "PlaceOrder"))
	if got := violationPaths(t, decodeErr(envelope.Decode(cmd, envelope.Command))); !slices.Equal(got, []string{"$.dataschema"}) {
		t.Errorf("command with absolute dataschema: paths %q", got)
	}
	noSchema := marshal(t, without(validCommand(), "dataschema"))
	if _, err := envelope.Decode(noSchema, envelope.Event); err != nil {
		t.Errorf("event without dataschema: %v", err)
	}
	if _, err := envelope.Decode(noSchema, envelope.Command); err == nil {
		t.Errorf("command without dataschema accepted")
	}
}

func decodeErr(_ *envelope.Envelope, err error) error { return err }

func TestMarshal(t *testing.T) {
	t.Parallel()
	env := &envelope.Envelope{SpecVersion: "1.0", ID: "i", Source: "s", Type: "NoteAdded",
		DataContentType: "application/json", Time: "2026-01-02T15:04:05Z", Data: json.RawMessage(`{"text":"<b>"}`)}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(env.Marshal(), &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"data", "datacontenttype", "id", "source", "specversion", "time", "type"}
	if !slices.Equal(keys, want) {
		t.Errorf("untyped event members = %q, want %q (no dataschema)", keys, want)
	}
	env.DataSchema = "http://x/events/a/1.0"
	back, err := envelope.Decode(env.Marshal(), envelope.Event)
	if err != nil {
		t.Fatalf("Decode(Marshal): %v", err)
	}
	if back.DataSchema != env.DataSchema || back.ID != env.ID || back.Time != env.Time {
		t.Errorf("round trip = %+v", back)
	}
	var d map[string]string
	if err := json.Unmarshal(back.Data, &d); err != nil || d["text"] != "<b>" {
		t.Errorf("data round trip = %s", back.Data)
	}
}

var uuidV5 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestCorrelationID(t *testing.T) {
	t.Parallel()
	base := envelope.CorrelationID("default", "urn:a", "1")
	if !uuidV5.MatchString(base) {
		t.Fatalf("CorrelationID = %q, not a name-based (v5) UUID", base)
	}
	if again := envelope.CorrelationID("default", "urn:a", "1"); again != base {
		t.Fatalf("not deterministic: %s then %s", base, again)
	}
	if !envelope.ValidTokenID(base) {
		t.Errorf("correlation id %q is not usable as a subject token / query value", base)
	}
	tests := []struct {
		name               string
		tenant, source, id string
	}{
		{"other tenant", "acme", "urn:a", "1"},
		{"other source", "default", "urn:b", "1"},
		{"other id", "default", "urn:a", "2"},
		{"source and id swapped", "default", "1", "urn:a"},
		{"boundary moved between source and id", "default", "urn:a1", ""},
		{"boundary moved between tenant and source", "defaultu", "rn:a", "1"},
		{"trailing space in id", "default", "urn:a", "1 "},
	}
	seen := map[string]string{base: "base"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := envelope.CorrelationID(tt.tenant, tt.source, tt.id)
			if prev, dup := seen[got]; dup {
				t.Errorf("CorrelationID(%q,%q,%q) = %s, same as %s", tt.tenant, tt.source, tt.id, got, prev)
			}
			seen[got] = tt.name
		})
	}
}

func TestEventID(t *testing.T) {
	t.Parallel()
	corr := envelope.CorrelationID("default", "s", "1")
	base := envelope.EventID(corr, 0, "OrderPlaced")
	if !uuidV5.MatchString(base) {
		t.Fatalf("EventID = %q, not a v5 UUID", base)
	}
	if envelope.EventID(corr, 0, "OrderPlaced") != base {
		t.Fatal("EventID is not deterministic")
	}
	others := map[string]string{
		"n=1":        envelope.EventID(corr, 1, "OrderPlaced"),
		"n=10":       envelope.EventID(corr, 10, "OrderPlaced"),
		"other type": envelope.EventID(corr, 0, "OrderCancelled"),
		"other corr": envelope.EventID(envelope.CorrelationID("default", "s", "2"), 0, "OrderPlaced"),
		"corr as id": corr,
	}
	seen := map[string]string{base: "base"}
	for name, id := range others {
		if prev, dup := seen[id]; dup {
			t.Errorf("%s: EventID %s equals %s", name, id, prev)
		}
		seen[id] = name
	}
	// Large and many indexes stay distinct.
	ids := map[string]int{}
	for n := range 2000 {
		id := envelope.EventID(corr, n, "A")
		if m, dup := ids[id]; dup {
			t.Fatalf("EventID n=%d equals n=%d", n, m)
		}
		ids[id] = n
	}
}

func TestKebabCase(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"RegisterAgent", "register-agent"},
		{"PlaceOrder", "place-order"},
		{"CommandRejected", "command-rejected"},
		{"AddNote", "add-note"},
		{"A", "a"},
		{"Order2Placed", "order2-placed"},
		{"V2Order", "v2-order"},
		{"DeleteSubscription", "delete-subscription"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got := envelope.KebabCase(tt.in)
			if got != tt.want {
				t.Errorf("KebabCase(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if !envelope.ValidSchemaName(got) {
				t.Errorf("KebabCase(%q) = %q is not a valid schema name", tt.in, got)
			}
		})
	}
	// Every valid type gives a valid schema name.
	for _, typ := range []string{"HTTPRequest", "ABC", "X9Y", "OrderV10"} {
		if !envelope.ValidType(typ) {
			t.Fatalf("%q should be a valid type", typ)
		}
		if s := envelope.KebabCase(typ); !envelope.ValidSchemaName(s) {
			t.Errorf("KebabCase(%q) = %q is not a valid schema name", typ, s)
		}
	}
}

func TestParseDataSchema(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ref             string
		schema, version string
		ok              bool
	}{
		{"place-order/1.0", "place-order", "1.0", true},
		{"place-order/2.0", "place-order", "2.0", true},
		{"a/0.1", "a", "0.1", true},
		{"register-agent/10.20", "register-agent", "10.20", true},
		{"x2-y3/1.0", "x2-y3", "1.0", true},
		{"", "", "", false},
		{"place-order", "", "", false},
		{"place-order/", "", "", false},
		{"/1.0", "", "", false},
		{"place-order/1", "", "", false},
		{"place-order/1.0.0", "", "", false},
		{"place-order/v1.0", "", "", false},
		{"Place-Order/1.0", "", "", false},
		{"place_order/1.0", "", "", false},
		{"place--order/1.0", "", "", false},
		{"-place/1.0", "", "", false},
		{"place-/1.0", "", "", false},
		{"1place/1.0", "", "", false},
		{"commands/place-order/1.0", "", "", false},
		{"http://h/commands/place-order/1.0", "", "", false},
		{"place-order/1.0\n", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			t.Parallel()
			s, v, ok := envelope.ParseDataSchema(tt.ref)
			if s != tt.schema || v != tt.version || ok != tt.ok {
				t.Errorf("ParseDataSchema(%q) = %q, %q, %v; want %q, %q, %v", tt.ref, s, v, ok, tt.schema, tt.version, tt.ok)
			}
		})
	}
}

func TestValidators(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fn   func(string) bool
		good []string
		bad  []string
	}{
		{"ValidTenant", envelope.ValidTenant,
			[]string{"default", "a", "0", "acme-eu-1", strings.Repeat("a", 63)},
			[]string{"", "-a", "Acme", "a_b", "a.b", "a b", "a*", "a>", strings.Repeat("a", 64)}},
		{"ValidTokenID", envelope.ValidTokenID,
			[]string{"o-1", "A_b-9", strings.Repeat("x", 128)},
			[]string{"", "a.b", "a*", "a>", "a b", "é", strings.Repeat("x", 129)}},
		{"ValidType", envelope.ValidType,
			[]string{"A", "PlaceOrder", "Order2", "HTTPRequest", "A" + strings.Repeat("b", envelope.MaxTypeLen-1)},
			[]string{"", "a", "placeOrder", "Place-Order", "Place.Order", "2Order", "A" + strings.Repeat("b", envelope.MaxTypeLen)}},
		{"ValidSchemaName", envelope.ValidSchemaName,
			[]string{"a", "place-order", "v2-order"},
			[]string{"", "Place", "place_order", "place--order", "-a", "a-", "1a"}},
		{"ValidVersion", envelope.ValidVersion,
			[]string{"1.0", "0.1", "10.200"},
			[]string{"", "1", "1.0.0", "v1.0", "1.", ".1", "a.b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, s := range tt.good {
				if !tt.fn(s) {
					t.Errorf("%s(%q) = false, want true", tt.name, s)
				}
			}
			for _, s := range tt.bad {
				if tt.fn(s) {
					t.Errorf("%s(%q) = true, want false", tt.name, s)
				}
			}
		})
	}
}

// rawCommand is a valid command envelope with id and source given as JSON
// string literals, escapes as written.
func rawCommand(id, source string) []byte {
	return []byte(`{"specversion":"1.0","id":` + id + `,"source":` + source + `,"type":"PlaceOrder","datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-02T15:04:05Z","data":{}}`)
}

// TestPairedSurrogatesAndLookalikes: a whole pair, an escaped backslash
// before "u", and U+FFFD written out are ordinary text.
func TestPairedSurrogatesAndLookalikes(t *testing.T) {
	for _, id := range []string{`"\ud83d\ude00"`, `"\uD83D\uDE00x"`, `"a\\ud800"`, `"\ufffd"`, "\"\uFFFD\"", `"plain"`} {
		if _, err := envelope.Decode(rawCommand(id, `"s"`), envelope.Command); err != nil {
			t.Errorf("id %s: %v", id, err)
		}
	}
}
