package catalog

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCheckRefs: local references, recursion through properties and
// items, and definitions pass; a cycle that never descends into the
// instance, a remote or file reference, and a reference to nothing are
// refused with the place named.
func TestCheckRefs(t *testing.T) {
	for name, c := range map[string]struct {
		schema string
		want   string // "" passes; else a part of the error
	}{
		"plain":                   {`{"type":"object","properties":{"a":{"type":"string"}}}`, ""},
		"definitions":             {`{"type":"object","properties":{"a":{"$ref":"#/definitions/s"}},"definitions":{"s":{"type":"string"}}}`, ""},
		"tree through items":      {`{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}}`, ""},
		"tree through properties": {`{"type":"object","properties":{"next":{"$ref":"#"}}}`, ""},
		"escaped pointer":         {`{"properties":{"a":{"$ref":"#/definitions/x~1y"}},"definitions":{"x/y":{"type":"string"}}}`, ""},
		"self at the root":        {`{"type":"object","$ref":"#"}`, "a cycle"},
		"through allOf":           {`{"allOf":[{"$ref":"#"}]}`, "a cycle"},
		"between definitions":     {`{"properties":{"x":{"$ref":"#/definitions/a"}},"definitions":{"a":{"$ref":"#/definitions/b"},"b":{"anyOf":[{"$ref":"#/definitions/a"}]}}}`, "a cycle"},
		"through not":             {`{"not":{"not":{"$ref":"#"}}}`, "a cycle"},
		"remote":                  {`{"properties":{"a":{"$ref":"http://127.0.0.1:1/s.json"}}}`, "not local"},
		"file":                    {`{"properties":{"a":{"$ref":"file:///etc/passwd"}}}`, "not local"},
		"relative file":           {`{"properties":{"a":{"$ref":"other.json#/x"}}}`, "not local"},
		"nowhere":                 {`{"properties":{"a":{"$ref":"#/definitions/none"}}}`, "names no schema"},
		"anchor":                  {`{"properties":{"a":{"$ref":"#foo"}}}`, "not a JSON pointer"},
		"not a string":            {`{"properties":{"a":{"$ref":5}}}`, "must be a string"},
	} {
		t.Run(name, func(t *testing.T) {
			var tree any
			if err := json.Unmarshal([]byte(c.schema), &tree); err != nil {
				t.Fatal(err)
			}
			err := checkRefs(tree)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// TestRefErrorsQuoteWholeCharacters: a long $ref is quoted cut on a
// character boundary, never with half a character (which %q would show
// as a \x escape).
func TestRefErrorsQuoteWholeCharacters(t *testing.T) {
	ref := "http://x/" + strings.Repeat("é", 100) // byte 128 falls inside an é
	err := checkRefs(map[string]any{"properties": map[string]any{"a": map[string]any{"$ref": ref}}})
	if err == nil {
		t.Fatal("a remote $ref passed")
	}
	if msg := err.Error(); strings.Contains(msg, `\x`) || !strings.Contains(msg, "éé…") {
		t.Errorf("error %q: want the $ref cut after a whole é and marked", msg)
	}
}
