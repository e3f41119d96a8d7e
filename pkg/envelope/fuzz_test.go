package envelope_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// FuzzDecode checks that Decode never panics, fails only with a known
// *errs.Error, and that whatever it accepts survives Marshal and a second
// Decode unchanged. `make fuzz` runs it.
func FuzzDecode(f *testing.F) {
	seeds := []string{
		`{"specversion":"1.0","id":"c-1","source":"urn:t","type":"PlaceOrder","datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-02T15:04:05Z","data":{"orderId":"o-1","items":[{"sku":"A","quantity":1}]}}`,
		`{"specversion":"1.0","id":"e-1","source":"agentbus","type":"NoteAdded","datacontenttype":"application/json","time":"2026-01-02T15:04:05.999999999+02:00","data":{"text":"<&>\u2028"}}`,
		`{"specversion":"1.0","id":"e-2","source":"agentbus","type":"OrderPlaced","datacontenttype":"application/json","dataschema":"http://127.0.0.1:8080/events/order-placed/1.0","time":"2026-01-02T15:04:05Z","data":{}}`,
		` { "data" : { "a" : [ 1 , 2.5e3 , null , true , "\ud83d\ude00" ] } , "specversion":"1.0" } `,
		`{"specversion":"1.0","specversion":"1.0"}`,
		`{"id":"a","\u0069d":"b"}`,
		`{"extra":1}`,
		`{"time":"2026-13-01T00:00:00Z","type":"lower","dataschema":"x/1"}`,
		`{"id":"\u0000","source":" "}`,
		`{"data":[]}`,
		`{"data":{"deep":{"deeper":{"deepest":[[[[]]]]}}}}`,
		`[]`, `null`, `"x"`, `1`, ``, `{`, `}`, `{}x`, `{}{}`, `{"a":}`, "{\"a\":\"\xff\"}",
		`{"data":{"big":123456789012345678901234567890}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, kind := range []envelope.Kind{envelope.Command, envelope.Event} {
			env, err := envelope.Decode(raw, kind)
			if err != nil {
				if env != nil {
					t.Fatalf("kind %d: Decode returned an envelope and an error %v", kind, err)
				}
				var e *errs.Error
				if !errors.As(err, &e) {
					t.Fatalf("kind %d: error %T %v is not an *errs.Error", kind, err, err)
				}
				switch e.Code {
				case errs.CodeMalformedJSON:
				case errs.CodeValidationFailed:
					if len(e.Violations) == 0 {
						t.Fatalf("kind %d: VALIDATION_FAILED without violations", kind)
					}
					for _, v := range e.Violations {
						if v.Path != "$" && !strings.HasPrefix(v.Path, "$.") || v.Message == "" {
							t.Fatalf("kind %d: bad violation %+v", kind, v)
						}
					}
				default:
					t.Fatalf("kind %d: unexpected code %s", kind, e.Code)
				}
				continue
			}
			if env == nil {
				t.Fatalf("kind %d: Decode returned neither envelope nor error", kind)
			}
			checkInvariants(t, kind, env)
			out := env.Marshal()
			back, err := envelope.Decode(out, kind)
			if err != nil {
				t.Fatalf("kind %d: Decode(Marshal(env)) failed: %v\ninput:  %q\nmarshal: %s", kind, err, raw, out)
			}
			if !equalEnvelope(t, env, back) {
				t.Fatalf("kind %d: round trip changed the envelope\nfirst:  %+v\nsecond: %+v", kind, env, back)
			}
		}
	})
}

func checkInvariants(t *testing.T, kind envelope.Kind, env *envelope.Envelope) {
	t.Helper()
	switch {
	case env.SpecVersion != envelope.SpecVersion:
		t.Fatalf("accepted specversion %q", env.SpecVersion)
	case env.DataContentType != envelope.ContentType:
		t.Fatalf("accepted datacontenttype %q", env.DataContentType)
	case !envelope.ValidType(env.Type):
		t.Fatalf("accepted type %q", env.Type)
	case strings.TrimSpace(env.ID) == "" || strings.TrimSpace(env.Source) == "":
		t.Fatalf("accepted empty id %q or source %q", env.ID, env.Source)
	case len(env.Data) == 0 || env.Data[0] != '{' || !json.Valid(env.Data):
		t.Fatalf("accepted data %q", env.Data)
	}
	if kind == envelope.Command {
		if _, _, ok := envelope.ParseDataSchema(env.DataSchema); !ok {
			t.Fatalf("accepted command dataschema %q", env.DataSchema)
		}
	}
}

// equalEnvelope compares the string members exactly and data as JSON
// values (Marshal compacts data and escapes HTML characters).
func equalEnvelope(t *testing.T, a, b *envelope.Envelope) bool {
	t.Helper()
	x, y := *a, *b
	x.Data, y.Data = nil, nil
	if !reflect.DeepEqual(x, y) {
		return false
	}
	return reflect.DeepEqual(jsonValue(t, a.Data), jsonValue(t, b.Data))
}

func jsonValue(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("data %q is not JSON: %v", raw, err)
	}
	return v
}
