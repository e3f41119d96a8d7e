package errs_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/errs"
)

func TestStatusOf(t *testing.T) {
	t.Parallel()
	want := map[errs.Code]int{
		errs.CodeInvalidRequest: 400, errs.CodeValidationFailed: 400, errs.CodeMalformedJSON: 400,
		errs.CodeUnknownCommandType: 400, errs.CodeUnauthenticated: 401, errs.CodeForbidden: 403,
		errs.CodeSchemaNotFound: 404, errs.CodeRouteNotFound: 404, errs.CodeAgentNotFound: 404,
		errs.CodeServiceNotFound: 404, errs.CodeTraceNotFound: 404, errs.CodeTenantNotFound: 404,
		errs.CodeMethodNotAllowed: 405, errs.CodeAgentAlreadyRegistered: 409, errs.CodeServiceAlreadyExists: 409,
		errs.CodeConflict: 409, errs.CodePayloadTooLarge: 413, errs.CodeUnsupportedMediaType: 415,
		errs.CodeCapabilityNotSupported: 422, errs.CodeRateLimited: 429, errs.CodeInternal: 500,
		errs.CodeUnavailable: 503,
	}
	for code, status := range want {
		if got := errs.StatusOf(code); got != status {
			t.Errorf("StatusOf(%s) = %d, want %d", code, got, status)
		}
	}
	if got := errs.StatusOf("NO_SUCH_CODE"); got != 500 {
		t.Errorf("unknown code → %d, want 500", got)
	}
}

func TestBodyOf(t *testing.T) {
	t.Parallel()
	e := errs.Invalid("bad", []errs.Violation{{Path: "$.a", Message: "m"}})
	e.Details = map[string]any{"extra": 1}
	b := errs.BodyOf(e)
	raw, _ := json.Marshal(b)
	var got map[string]map[string]any
	_ = json.Unmarshal(raw, &got)
	d, _ := got["error"]["details"].(map[string]any)
	if got["error"]["code"] != "VALIDATION_FAILED" || got["error"]["message"] != "bad" || d["extra"] != float64(1) || d["violations"] == nil {
		t.Errorf("BodyOf = %s", raw)
	}
	if e.Details["violations"] != nil {
		t.Error("BodyOf changed the error's details")
	}
	raw, _ = json.Marshal(errs.BodyOf(errs.New(errs.CodeAgentNotFound, "x")))
	if !bytes.Contains(raw, []byte(`"details":{}`)) {
		t.Errorf("details must be an empty object, not absent or null: %s", raw)
	}
}

func TestBodyOfCapsViolations(t *testing.T) {
	v := make([]errs.Violation, errs.MaxViolations+7)
	for i := range v {
		v[i] = errs.Violation{Path: "$.x", Message: "bad"}
	}
	b := errs.BodyOf(errs.Invalid("invalid", v))
	if got := len(b.Error.Details["violations"].([]errs.Violation)); got != errs.MaxViolations {
		t.Fatalf("listed %d violations, want %d", got, errs.MaxViolations)
	}
	if b.Error.Details["violationsOmitted"] != 7 {
		t.Fatalf("violationsOmitted = %v, want 7", b.Error.Details["violationsOmitted"])
	}
}

// TestBodyOfCapsEchoes: whatever built an error, its answer carries a
// bounded message and bounded violations.
func TestBodyOfCapsEchoes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 5000)
	e := errs.Invalid("bad "+long, []errs.Violation{{Path: long, Message: long}, {Path: "$.a", Message: "short"}})
	b := errs.BodyOf(e)
	if n := len(b.Error.Message); n > 1100 || !strings.HasSuffix(b.Error.Message, "…") {
		t.Errorf("message of %d bytes: %.40s…", n, b.Error.Message)
	}
	vs := b.Error.Details["violations"].([]errs.Violation)
	if len(vs[0].Path) > 300 || len(vs[0].Message) > 300 || vs[1].Message != "short" {
		t.Errorf("violations not capped: %d, %d bytes", len(vs[0].Path), len(vs[0].Message))
	}
	if e.Violations[0].Path != long {
		t.Error("BodyOf changed the error's violations")
	}
}

// TestEdge: a fault inside agentbus is logged once, with its cause, and
// shown as INTERNAL_ERROR without it; a refusal is shown as it is and not
// logged.
func TestEdge(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	e := errs.Edge(log, fmt.Errorf("disk on fire"), "request failed", "what", "x")
	if e.Code != errs.CodeInternal || e.Message != "internal error" || strings.Contains(string(mustJSON(t, errs.BodyOf(e))), "fire") {
		t.Errorf("a fault is shown as %+v", e)
	}
	if n := strings.Count(logged.String(), "disk on fire"); n != 1 {
		t.Errorf("the fault was logged %d times: %s", n, logged.String())
	}
	logged.Reset()
	e = errs.Edge(log, errs.Unavailable("retry"), "request failed")
	if e.Code != errs.CodeUnavailable || logged.Len() == 0 {
		t.Errorf("SERVICE_UNAVAILABLE is a fault, logged: %+v, log %q", e, logged.String())
	}
	logged.Reset()
	e = errs.Edge(log, errs.New(errs.CodeForbidden, "no"), "request failed")
	if e.Code != errs.CodeForbidden || e.Message != "no" || logged.Len() != 0 {
		t.Errorf("a refusal: %+v, log %q", e, logged.String())
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
