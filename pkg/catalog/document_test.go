package catalog

import (
	"os"
	"testing"

	"github.com/xeipuuv/gojsonschema"
)

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
