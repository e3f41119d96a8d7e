package envelope

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// referenceDecode is what gojsonschema's bytes loader does.
func referenceDecode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

var valueSeeds = []string{
	`{}`, `[]`, `{"a":1}`, ` {"orderId":"o-1","items":[{"sku":"A","qty":2}],"note":null,"gift":false} `,
	`{"n":-0.5e+10,"m":0,"k":1E3,"big":123456789012345678901234567890}`,
	`{"s":"caf\u00e9 \"q\" \/ \n","t":"ünï","u":"\ud83d\ude00"}`,
	`{"a":1,"a":2}`, `[1,[2,[3,[4]]]]`, `"x"`, `12`, `true`, `null`, "{\"a\":\"\xff\"}",
	`{"a":01}`, `{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":1} x`, `{"a":"\x01"}`,
	`{"a":.5}`, `{"a":1.}`, `{"a":1e}`, `{"a":-}`, `{"a":tru}`, `{`, ``, ` `, `[`, `"unterminated`,
	`{"a":"\q"}`, `{"a":"\u12"}`,
}

// FuzzDecodeValue: whatever DecodeValue accepts, it decodes exactly as
// json.Decoder with UseNumber does.
func FuzzDecodeValue(f *testing.F) {
	for _, s := range valueSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := DecodeValue(data)
		if !ok {
			return
		}
		want, err := referenceDecode(data)
		if err != nil {
			t.Fatalf("%q: decoded as %#v; encoding/json says %v", data, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decoded as %#v; encoding/json: %#v", data, got, want)
		}
	})
}

// TestDecodeValueUsualData: the usual command data is decoded here, not
// left to encoding/json (through gojsonschema's loader).
func TestDecodeValueUsualData(t *testing.T) {
	for _, s := range valueSeeds[:13] {
		got, ok := DecodeValue([]byte(s))
		if !ok {
			t.Errorf("%s: left to encoding/json", s)
			continue
		}
		want, err := referenceDecode([]byte(s))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %#v, encoding/json %#v (%v)", s, got, want, err)
		}
	}
	for _, s := range valueSeeds[13:] {
		if _, ok := DecodeValue([]byte(s)); ok {
			t.Errorf("%q: accepted, want it left to gojsonschema's loader", s)
		}
	}
}

// TestDecodeValueDepth: nesting is bounded where encoding/json bounds it.
func TestDecodeValueDepth(t *testing.T) {
	for _, n := range []int{maxValueDepth - 1, maxValueDepth, maxValueDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			closing := "]"
			if open != "[" {
				closing = "}"
			}
			doc := []byte(strings.Repeat(open, n) + strings.Repeat(closing, n))
			_, refErr := referenceDecode(doc)
			got, ok := DecodeValue(doc)
			if ok != (refErr == nil) {
				t.Errorf("%d levels of %s: decoded %v, encoding/json says %v", n, open, ok, refErr)
			}
			if ok {
				want, _ := referenceDecode(doc)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%d levels of %s: decoded differently", n, open)
				}
			}
		}
	}
}
