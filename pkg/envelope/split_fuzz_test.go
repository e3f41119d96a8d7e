package envelope

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzSplit checks the one-pass splitter against the tokenizer: on every
// valid JSON object they must find the same members, duplicates and raw
// values; and Marshal must write JSON that encoding/json reads back.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1}`, `{"a":"x","a":"y"}`, ` { "k\"ey" : [1,{"x":"}"}] , "b" : null } `,
		`{"data":{"s":"\\","t":"\u00e9"},"id":"i\n"}`, `{"a":{"b":{"c":[[],{}]}},"d":-1.5e3,"e":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !utf8.Valid(raw) || !json.Valid(raw) || !bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("{")) {
			return
		}
		fast, ferr := splitValid(raw)
		slow, serr := splitSlow(raw)
		if (ferr == nil) != (serr == nil) {
			t.Fatalf("errors differ: fast %v, slow %v", ferr, serr)
		}
		if ferr != nil {
			return
		}
		if !reflect.DeepEqual(fast.order, slow.order) || !reflect.DeepEqual(fast.dups, slow.dups) {
			t.Fatalf("members differ: fast %q/%q, slow %q/%q", fast.order, fast.dups, slow.order, slow.dups)
		}
		for k, v := range slow.values {
			// Numbers as written: a valid JSON number can be past what a
			// float64 holds.
			a, aerr := decodeNumbers(v)
			b, berr := decodeNumbers(fast.values[k])
			if aerr != nil || berr != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("value of %q differs: fast %s, slow %s (%v, %v)", k, fast.values[k], v, berr, aerr)
			}
		}
		for _, k := range fast.order {
			s, ok := jsonString(fast.values[k])
			var want string
			if wantOK := json.Unmarshal(fast.values[k], &want) == nil && fast.values[k][0] == '"'; ok != wantOK || s != want {
				t.Fatalf("string %s: got %q/%v, want %q/%v", fast.values[k], s, ok, want, wantOK)
			}
		}
		env := Envelope{SpecVersion: SpecVersion, ID: string(raw), Source: "s\x01\"\\", Type: "T", DataContentType: ContentType, Time: "t", Data: raw}
		v, err := decodeNumbers(env.Marshal())
		back, _ := v.(map[string]any)
		if err != nil || back["id"] != string(raw) || back["source"] != "s\x01\"\\" {
			t.Fatalf("Marshal is not read back: %v %v", err, back)
		}
	})
}

// decodeNumbers decodes one JSON value, numbers kept as json.Number.
func decodeNumbers(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}
