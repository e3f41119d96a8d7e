package catalog

import (
	"os"
	"strings"

	"bytes"
	"encoding/json"
	"github.com/xeipuuv/gojsonschema"
	"reflect"
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

var documentSeeds = []string{
	`{}`, `[]`, `{"a":1}`, ` {"orderId":"o-1","items":[{"sku":"A","qty":2}],"note":null,"gift":false} `,
	`{"n":-0.5e+10,"m":0,"k":1E3,"big":123456789012345678901234567890}`,
	`{"s":"caf\u00e9 \"q\" \/ \n","t":"ünï","u":"\ud83d\ude00"}`,
	`{"a":1,"a":2}`, `[1,[2,[3,[4]]]]`, `"x"`, `12`, `true`, `null`, "{\"a\":\"\xff\"}",
	`{"a":01}`, `{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":1} x`, `{"a":"\x01"}`,
	`{"a":.5}`, `{"a":1.}`, `{"a":1e}`, `{"a":-}`, `{"a":tru}`, `{`, ``, ` `, `[`, `"unterminated`,
	`{"a":"\q"}`, `{"a":"\u12"}`,
}

// FuzzDocument: whatever decodeDocument accepts, it decodes exactly as
// json.Decoder with UseNumber does.
func FuzzDocument(f *testing.F) {
	for _, s := range documentSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := decodeDocument(data)
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

// TestDocumentDecodesUsualData: the usual command data is decoded here, not
// left to gojsonschema's loader, and validation answers the same either way.
func TestDocumentDecodesUsualData(t *testing.T) {
	for _, s := range documentSeeds[:13] {
		got, ok := decodeDocument([]byte(s))
		if !ok {
			t.Errorf("%s: left to encoding/json", s)
			continue
		}
		want, err := referenceDecode([]byte(s))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %#v, encoding/json %#v (%v)", s, got, want, err)
		}
	}
	for _, s := range documentSeeds[13:] {
		if _, ok := decodeDocument([]byte(s)); ok {
			t.Errorf("%q: accepted, want it left to gojsonschema's loader", s)
		}
	}
}

// BenchmarkValidate compares validating place-order/1.0 data through
// gojsonschema's bytes loader with the document loader Entry.Validate uses.
func BenchmarkValidate(b *testing.B) {
	c, err := Load(Builtin(), os.DirFS("../../config/catalog"))
	if err != nil {
		b.Fatal(err)
	}
	e, ok := c.Command("place-order", "1.0")
	if !ok {
		b.Fatal("place-order/1.0 not in the example catalogue")
	}
	data := []byte(`{"orderId":"bench-1","customer":"ada","items":[{"sku":"A-1","quantity":2}]}`)
	b.Run("bytes-loader", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if res, err := e.compiled.Validate(gojsonschema.NewBytesLoader(data)); err != nil || !res.Valid() {
				b.Fatal(err, res)
			}
		}
	})
	b.Run("document-loader", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if v := e.Validate(data); v != nil {
				b.Fatal(v)
			}
		}
	})
}

// TestDocumentDepth: nesting is bounded where encoding/json bounds it.
func TestDocumentDepth(t *testing.T) {
	for _, n := range []int{maxDocDepth - 1, maxDocDepth, maxDocDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			closing := "]"
			if open != "[" {
				closing = "}"
			}
			doc := []byte(strings.Repeat(open, n) + strings.Repeat(closing, n))
			_, refErr := referenceDecode(doc)
			got, ok := decodeDocument(doc)
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
