package catalog

import (
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/xeipuuv/gojsonreference"
	"github.com/xeipuuv/gojsonschema"
)

// documentLoader hands gojsonschema a document decoded by envelope.DecodeValue
// instead of its bytes loader's json.Decoder: the same values
// (map[string]any, []any, json.Number, string, bool, nil) at a fraction of
// the cost. Validation runs on every POST /commands; BenchmarkValidate shows
// the difference.
type documentLoader struct{ doc any }

func (l documentLoader) JsonSource() any        { return l.doc }
func (l documentLoader) LoadJSON() (any, error) { return l.doc, nil }
func (l documentLoader) LoaderFactory() gojsonschema.JSONLoaderFactory {
	return gojsonschema.DefaultJSONLoaderFactory{}
}
func (l documentLoader) JsonReference() (gojsonreference.JsonReference, error) {
	return gojsonreference.NewJsonReference("#")
}

// loaderFor returns the loader of data and, when decoded here (data is
// one JSON value this decoder vouches for), the document, or where it
// breaks the data rules (envelope.DecodeData, paths under "$.data");
// otherwise gojsonschema's own loader, which says what is wrong, and ok
// false.
func loaderFor(data []byte) (l gojsonschema.JSONLoader, doc any, problems []errs.Violation, ok bool) {
	doc, problems, ok = envelope.DecodeData(data, "$.data")
	if ok {
		return documentLoader{doc}, doc, problems, true
	}
	return gojsonschema.NewBytesLoader(data), nil, nil, false
}
