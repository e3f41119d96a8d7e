package e2e_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/test/testkit"
)

// TestSubmitRejectsBadEnvelopes violates each envelope rule alone over
// POST /commands and checks the 400 error body lists it with its JSON
// path, and that nothing reached the command stream.
func TestSubmitRejectsBadEnvelopes(t *testing.T) {
	t.Parallel()
	s := start(t)
	base := func() map[string]any {
		return placeOrder("o-bad")
	}
	without := func(k string) func(map[string]any) { return func(m map[string]any) { delete(m, k) } }
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	setData := func(f func(d map[string]any)) func(map[string]any) {
		return func(m map[string]any) { f(m["data"].(map[string]any)) }
	}
	tests := []struct {
		name   string
		mutate func(map[string]any)
		code   string
		paths  []string
	}{
		{"missing specversion", without("specversion"), "VALIDATION_FAILED", []string{"$.specversion"}},
		{"missing id", without("id"), "VALIDATION_FAILED", []string{"$.id"}},
		{"missing source", without("source"), "VALIDATION_FAILED", []string{"$.source"}},
		{"missing type", without("type"), "VALIDATION_FAILED", []string{"$.type"}},
		{"missing datacontenttype", without("datacontenttype"), "VALIDATION_FAILED", []string{"$.datacontenttype"}},
		{"missing dataschema", without("dataschema"), "VALIDATION_FAILED", []string{"$.dataschema"}},
		{"missing time", without("time"), "VALIDATION_FAILED", []string{"$.time"}},
		{"missing data", without("data"), "VALIDATION_FAILED", []string{"$.data"}},
		{"extra top-level property", set("subject", "orders/1"), "VALIDATION_FAILED", []string{"$.subject"}},
		{"specversion 0.3", set("specversion", "0.3"), "VALIDATION_FAILED", []string{"$.specversion"}},
		{"specversion a number", set("specversion", 1), "VALIDATION_FAILED", []string{"$.specversion"}},
		{"specversion null", set("specversion", nil), "VALIDATION_FAILED", []string{"$.specversion"}},
		{"datacontenttype text/plain", set("datacontenttype", "text/plain"), "VALIDATION_FAILED", []string{"$.datacontenttype"}},
		{"datacontenttype with parameters", set("datacontenttype", "application/json; charset=utf-8"), "VALIDATION_FAILED", []string{"$.datacontenttype"}},
		{"empty id", set("id", ""), "VALIDATION_FAILED", []string{"$.id"}},
		{"blank id", set("id", "   "), "VALIDATION_FAILED", []string{"$.id"}},
		{"null id", set("id", nil), "VALIDATION_FAILED", []string{"$.id"}},
		{"empty source", set("source", ""), "VALIDATION_FAILED", []string{"$.source"}},
		{"type camelCase", set("type", "placeOrder"), "VALIDATION_FAILED", []string{"$.type"}},
		{"type kebab-case", set("type", "place-order"), "VALIDATION_FAILED", []string{"$.type"}},
		{"type dotted", set("type", "com.example.PlaceOrder"), "VALIDATION_FAILED", []string{"$.type"}},
		{"type not in the catalogue", set("type", "LaunchRocket"), "UNKNOWN_COMMAND_TYPE", []string{"$.type"}},
		{"dataschema absolute URI", set("dataschema", s.URL+"/commands/place-order/1.0"), "VALIDATION_FAILED", []string{"$.dataschema"}},
		{"dataschema of another type", set("dataschema", "cancel-order/1.0"), "VALIDATION_FAILED", []string{"$.dataschema"}},
		{"dataschema unknown version", set("dataschema", "place-order/9.0"), "VALIDATION_FAILED", []string{"$.dataschema"}},
		{"dataschema without version", set("dataschema", "place-order"), "VALIDATION_FAILED", []string{"$.dataschema"}},
		{"time a date only", set("time", "2026-01-02"), "VALIDATION_FAILED", []string{"$.time"}},
		{"time without zone", set("time", "2026-01-02T15:04:05"), "VALIDATION_FAILED", []string{"$.time"}},
		{"time not a date", set("time", "now"), "VALIDATION_FAILED", []string{"$.time"}},
		{"data an array", set("data", []any{}), "VALIDATION_FAILED", []string{"$.data"}},
		{"data a string", set("data", "{}"), "VALIDATION_FAILED", []string{"$.data"}},
		{"data null", set("data", nil), "VALIDATION_FAILED", []string{"$.data"}},
		{"data: quantity below minimum", setData(func(d map[string]any) { d["items"].([]any)[0].(map[string]any)["quantity"] = 0 }),
			"VALIDATION_FAILED", []string{"$.data.items.0.quantity"}},
		{"data: quantity not an integer", setData(func(d map[string]any) { d["items"].([]any)[0].(map[string]any)["quantity"] = 1.5 }),
			"VALIDATION_FAILED", []string{"$.data.items.0.quantity"}},
		{"data: required customer missing", setData(func(d map[string]any) { delete(d, "customer") }),
			"VALIDATION_FAILED", []string{"$.data.customer"}},
		{"data: orderId fails its pattern", setData(func(d map[string]any) { d["orderId"] = "o 1" }),
			"VALIDATION_FAILED", []string{"$.data.orderId"}},
		{"data: no items", setData(func(d map[string]any) { d["items"] = []any{} }),
			"VALIDATION_FAILED", []string{"$.data.items"}},
		{"data: 2.0 needs currency", set("dataschema", "place-order/2.0"),
			"VALIDATION_FAILED", []string{"$.data.currency"}},
		{"data: a property the schema does not describe", setData(func(d map[string]any) { d["blob"] = []any{1, 2, 3} }),
			"VALIDATION_FAILED", []string{"$.data.blob"}},
		{"data: an item's property the schema does not describe", setData(func(d map[string]any) { d["items"].([]any)[0].(map[string]any)["gift"] = true }),
			"VALIDATION_FAILED", []string{"$.data.items.0.gift"}},
		{"data: a note with something beside its text", func(m map[string]any) {
			m["type"], m["dataschema"], m["data"] = "AddNote", "add-note/1.0", map[string]any{"text": "x", "blob": []any{strings.Repeat("x", 1000)}}
		}, "VALIDATION_FAILED", []string{"$.data.blob"}},
		{"data: several schema violations", setData(func(d map[string]any) {
			delete(d, "customer")
			d["items"].([]any)[0].(map[string]any)["quantity"] = -1
		}), "VALIDATION_FAILED", []string{"$.data.customer", "$.data.items.0.quantity"}},
		{"several envelope violations at once", func(m map[string]any) {
			delete(m, "id")
			m["time"] = "yesterday"
			m["extra"] = 1
			m["specversion"] = "2.0"
		}, "VALIDATION_FAILED", []string{"$.extra", "$.id", "$.specversion", "$.time"}},
	}
	before := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := base()
			tt.mutate(env)
			r := postJSON(t, s.URL+"/commands", env)
			b := plError(t, r, 400, tt.code)
			if got := b.paths(); !slices.Equal(got, tt.paths) {
				t.Errorf("violation paths %q, want %q (%s)", got, tt.paths, r.Body)
			}
			for _, v := range b.Violations {
				if v.Message == "" {
					t.Errorf("violation %s without a message", v.Path)
				}
			}
			if n := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; n != before {
				t.Fatalf("command stream went from %d to %d messages", before, n)
			}
		})
	}

	raw := []struct {
		name        string
		contentType string
		body        string
		status      int
		code        string
		paths       []string
	}{
		{"duplicate top-level key", "application/json",
			`{"specversion":"1.0","id":"d-1","source":"s","type":"PlaceOrder","type":"CancelOrder","datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-02T15:04:05Z","data":{"orderId":"o-1","customer":"c","items":[{"sku":"A","quantity":1}]}}`,
			400, "VALIDATION_FAILED", []string{"$.type"}},
		{"duplicate data key", "application/json",
			`{"specversion":"1.0","id":"d-2","source":"s","type":"PlaceOrder","datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-02T15:04:05Z","data":{"orderId":"o-1","customer":"c","items":[{"sku":"A","quantity":1}]},"data":{}}`,
			400, "VALIDATION_FAILED", []string{"$.data"}},
		{"malformed JSON", "application/json", `{"specversion":"1.0",`, 400, "MALFORMED_JSON", nil},
		{"trailing garbage", "application/json", string(plJSON(t, placeOrder("o-t"))) + ` x`, 400, "MALFORMED_JSON", nil},
		{"two objects", "application/json", string(plJSON(t, placeOrder("o-t"))) + `{}`, 400, "MALFORMED_JSON", nil},
		{"empty body", "application/json", ``, 400, "MALFORMED_JSON", nil},
		{"invalid UTF-8", "application/json", "{\"id\":\"\xff\"}", 400, "MALFORMED_JSON", nil},
		{"array", "application/json", `[` + string(plJSON(t, placeOrder("o-t"))) + `]`, 400, "VALIDATION_FAILED", []string{"$"}},
		{"string", "application/json", `"PlaceOrder"`, 400, "VALIDATION_FAILED", []string{"$"}},
		{"null", "application/json", `null`, 400, "VALIDATION_FAILED", []string{"$"}},
		{"no Content-Type", "", string(plJSON(t, placeOrder("o-t"))), 415, "UNSUPPORTED_MEDIA_TYPE", nil},
		{"text/plain", "text/plain", string(plJSON(t, placeOrder("o-t"))), 415, "UNSUPPORTED_MEDIA_TYPE", nil},
		{"CloudEvents structured media type", "application/cloudevents+json", string(plJSON(t, placeOrder("o-t"))), 415, "UNSUPPORTED_MEDIA_TYPE", nil},
		{"form", "application/x-www-form-urlencoded", `a=b`, 415, "UNSUPPORTED_MEDIA_TYPE", nil},
		{"latin-1 charset", "application/json; charset=iso-8859-1", string(plJSON(t, placeOrder("o-t"))), 415, "UNSUPPORTED_MEDIA_TYPE", nil},
	}
	for _, tt := range raw {
		t.Run(tt.name, func(t *testing.T) {
			r := plPost(t, s, tt.contentType, []byte(tt.body), false)
			b := plError(t, r, tt.status, tt.code)
			if tt.paths != nil && !slices.Equal(b.paths(), tt.paths) {
				t.Errorf("violation paths %q, want %q", b.paths(), tt.paths)
			}
			if n := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; n != before {
				t.Fatalf("command stream went from %d to %d messages", before, n)
			}
		})
	}

	// Bodies over 1 MiB, with and without Content-Length.
	for _, chunked := range []bool{false, true} {
		name := "body over 1 MiB"
		if chunked {
			name += ", chunked"
		}
		t.Run(name, func(t *testing.T) {
			r := plPost(t, s, "application/json", plSizedPlaceOrder(t, "o-big", 1<<20+1), chunked)
			plError(t, r, 413, "PAYLOAD_TOO_LARGE")
			if n := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; n != before {
				t.Fatalf("command stream went from %d to %d messages", before, n)
			}
		})
	}

	t.Run("unknown query parameter", func(t *testing.T) {
		r := do(t, http.MethodPost, s.URL+"/commands?dryRun=true", "application/json", plJSON(t, placeOrder("o-q")))
		b := plError(t, r, 400, "VALIDATION_FAILED")
		if !slices.Equal(b.paths(), []string{"dryRun"}) {
			t.Errorf("violations %q", b.paths())
		}
	})

	// Nothing was processed either.
	testkit.WaitIdle(t, s.Conn.JS, testkit.PipelineConsumers()...)
	if n := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; n != before {
		t.Fatalf("command stream went from %d to %d messages", before, n)
	}
	if n := testkit.SubjectMsgs(t, s.Conn.JS, plEvents, "agentbus.evt.default.>"); n != 0 {
		t.Errorf("%d events were stored for rejected submissions", n)
	}
}

// TestSubmitBodyLimitBoundary: exactly 1 MiB is accepted, one byte more is
// not.
func TestSubmitBodyLimitBoundary(t *testing.T) {
	t.Parallel()
	s := start(t)
	for _, chunked := range []bool{false, true} {
		r := plPost(t, s, "application/json", plSizedPlaceOrder(t, "o-limit-"+map[bool]string{false: "a", true: "b"}[chunked], 1<<20), chunked)
		if r.Status != 202 {
			t.Fatalf("1 MiB envelope (chunked %v): %d %s", chunked, r.Status, r.Body)
		}
	}
	if n := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; n != 2 {
		t.Errorf("command stream holds %d messages, want 2", n)
	}
}

// plSizedPlaceOrder returns a valid PlaceOrder envelope of exactly size bytes
// (padded with white space before its closing brace: the example schemas
// take no property they do not describe).
func plSizedPlaceOrder(t *testing.T, orderID string, size int) []byte {
	t.Helper()
	b := plJSON(t, placeOrder(orderID))
	pad := size - len(b)
	if pad < 0 {
		t.Fatalf("envelope already %d bytes", len(b))
	}
	return append(append(b[:len(b)-1:len(b)-1], strings.Repeat(" ", pad)...), '}')
}

// TestRoutesAndMethods: unknown routes and wrong methods answer the error
// body too.
func TestRoutesAndMethods(t *testing.T) {
	t.Parallel()
	s := start(t)
	tests := []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, "/nope", 404, "ROUTE_NOT_FOUND"},
		{http.MethodGet, "/command", 404, "ROUTE_NOT_FOUND"},
		{http.MethodGet, "/events/order-placed/1.0/extra", 404, "ROUTE_NOT_FOUND"},
		{http.MethodGet, "/commands/place-order/2.0/examples", 404, "ROUTE_NOT_FOUND"},
		{http.MethodPost, "/nope", 404, "ROUTE_NOT_FOUND"},
		{http.MethodDelete, "/commands", 405, "METHOD_NOT_ALLOWED"},
		{http.MethodPut, "/commands", 405, "METHOD_NOT_ALLOWED"},
		{http.MethodPost, "/commands/place-order/1.0", 405, "METHOD_NOT_ALLOWED"},
		{http.MethodDelete, "/events/order-placed/1.0", 405, "METHOD_NOT_ALLOWED"},
		{http.MethodPatch, "/events", 405, "METHOD_NOT_ALLOWED"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			plError(t, do(t, tt.method, s.URL+tt.path, "application/json", plJSON(t, placeOrder("o-route"))), tt.status, tt.code)
		})
	}
	if n := testkit.StreamState(t, s.Conn.JS, plCommands).Msgs; n != 0 {
		t.Errorf("%d commands queued by requests to no route", n)
	}
}
