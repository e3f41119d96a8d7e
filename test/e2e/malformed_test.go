package e2e_test

import (
	"fmt"
	"net/http"
	"testing"
)

// TestMalformedBodies: every route that takes a JSON body answers a body
// that is not JSON with MALFORMED_JSON and a message in the caller's
// terms — what is wrong, at which byte, what was expected — never the
// decoder's own words.
func TestMalformedBodies(t *testing.T) {
	t.Parallel()
	s := start(t, allowInjection)
	for _, path := range []string{"/commands", "/events", "/agents", "/services"} {
		for _, tt := range []struct{ body, msg string }{
			{`{"id": "x", /* a comment */ "name": "n"}`, "the body is not valid JSON: unexpected '/' at byte 13; expected a property name in double quotes"},
			{`{"id": }`, "the body is not valid JSON: unexpected '}' at byte 8; expected a value"},
			{`{"id": "x"`, "the body is not valid JSON: it ends after byte 10, before the value is complete"},
			{`{"id": "x"} trailing`, "the body is not valid JSON: unexpected 't' at byte 13; expected nothing after the JSON value"},
			{``, "the body is not valid JSON: it is empty; expected a value"},
		} {
			r := do(t, http.MethodPost, s.URL+path, "application/json", []byte(tt.body))
			b := plError(t, r, http.StatusBadRequest, "MALFORMED_JSON")
			if b.Message != tt.msg {
				t.Errorf("POST %s %s:\n  %s\nwant\n  %s", path, tt.body, b.Message, tt.msg)
			}
		}
	}
}

// TestDataTheValidatorAndAReaderWouldReadApart: POST /commands refuses data
// the schema validator and a reader of the stored bytes could read
// differently — a member name twice, at any depth, and a number a float64
// does not carry exactly — with VALIDATION_FAILED at its path.
func TestDataTheValidatorAndAReaderWouldReadApart(t *testing.T) {
	t.Parallel()
	s := start(t)
	envelope := func(data string) []byte {
		return []byte(`{"specversion":"1.0","id":"` + fmt.Sprintf("apart-%d", seq.Add(1)) + `","source":"e2e-test","type":"PlaceOrder",` +
			`"datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-02T15:04:05Z","data":` + data + `}`)
	}
	for _, tt := range []struct{ data, path string }{
		{`{"orderId":"o-1","customer":"ada","customer":"bob","items":[{"sku":"A","quantity":1}]}`, "$.data.customer"},
		{`{"orderId":"o-2","customer":"ada","items":[{"sku":"A","quantity":1,"quantity":0}]}`, "$.data.items.0.quantity"},
		{`{"orderId":"o-3","customer":"ada","items":[{"sku":"A","quantity":1e400}]}`, "$.data.items.0.quantity"},
		{`{"orderId":"o-4","customer":"ada","items":[{"sku":"A","quantity":123456789012345678901234567890123456789012345}]}`, "$.data.items.0.quantity"},
		{`{"orderId":"o-5","customer":"ada","items":[{"sku":"A","quantity":9007199254740993}]}`, "$.data.items.0.quantity"},
	} {
		r := do(t, http.MethodPost, s.URL+"/commands", "application/json", envelope(tt.data))
		b := plError(t, r, http.StatusBadRequest, "VALIDATION_FAILED")
		if got := b.paths(); len(got) != 1 || got[0] != tt.path {
			t.Errorf("%s: violations at %v, want %s", tt.data, got, tt.path)
		}
	}
	// The same top-level key twice in the envelope is refused too.
	r := do(t, http.MethodPost, s.URL+"/commands", "application/json",
		[]byte(`{"specversion":"1.0","id":"apart-top","id":"apart-top-2","source":"e2e-test","type":"AddNote",`+
			`"datacontenttype":"application/json","dataschema":"add-note/1.0","time":"2026-01-02T15:04:05Z","data":{"text":"x"}}`))
	if got := plError(t, r, http.StatusBadRequest, "VALIDATION_FAILED").paths(); len(got) != 1 || got[0] != "$.id" {
		t.Errorf("a repeated envelope member: violations at %v, want $.id", got)
	}
	// The largest integer a float64 carries exactly, and numbers written
	// otherwise, pass.
	ok := do(t, http.MethodPost, s.URL+"/commands", "application/json",
		envelope(`{"orderId":"o-6","customer":"ada","items":[{"sku":"A","quantity":9007199254740992},{"sku":"B","quantity":1.0},{"sku":"C","quantity":2E0}]}`))
	if ok.Status != http.StatusAccepted {
		t.Fatalf("exact numbers: %d %s", ok.Status, ok.Body)
	}
}
