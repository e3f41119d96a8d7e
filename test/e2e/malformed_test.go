package e2e_test

import (
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
