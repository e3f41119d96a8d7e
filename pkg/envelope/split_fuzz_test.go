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
			var a, b any
			if json.Unmarshal(v, &a) != nil || json.Unmarshal(fast.values[k], &b) != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("value of %q differs: fast %s, slow %s", k, fast.values[k], v)
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
		var back map[string]any
		if err := json.Unmarshal(env.Marshal(), &back); err != nil || back["id"] != string(raw) || back["source"] != "s\x01\"\\" {
			t.Fatalf("Marshal is not read back: %v %v", err, back)
		}
	})
}
