package a2a

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/agentbus/agentbus/pkg/errs"
)

// TestEveryCodeHasAnA2AError: the table maps every error code agentbus
// has, and nothing else.
func TestEveryCodeHasAnA2AError(t *testing.T) {
	for _, c := range errs.Codes() {
		if _, ok := errorOf[c]; !ok {
			t.Errorf("error code %s has no A2A error in errorOf", c)
		}
	}
	for c := range errorOf {
		if !c.Known() {
			t.Errorf("errorOf maps %s, which is not an agentbus code", c)
		}
	}
}

// TestToA2ACarriesTheErrorBody: the A2A error has the mapped sentinel and
// REST's error body as details; an internal cause is not shown.
func TestToA2ACarriesTheErrorBody(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	err := toA2A(context.Background(), log, errs.Invalid("bad", []errs.Violation{{Path: "$.data.x", Message: "is required"}}))
	var ae *a2a.Error
	if !errors.As(err, &ae) || !errors.Is(err, a2a.ErrInvalidParams) {
		t.Fatalf("got %v, want invalid params", err)
	}
	if ae.Details["code"] != "VALIDATION_FAILED" || ae.Details["message"] != "bad" {
		t.Fatalf("details %v", ae.Details)
	}
	d, _ := ae.Details["details"].(map[string]any)
	if v, _ := d["violations"].([]errs.Violation); len(v) != 1 || v[0].Path != "$.data.x" {
		t.Fatalf("violations %v", d["violations"])
	}
	err = toA2A(context.Background(), log, errors.New("nats: secret internals"))
	if !errors.As(err, &ae) || !errors.Is(err, a2a.ErrInternalError) || ae.Message != "internal error" {
		t.Fatalf("internal error shown as %v", err)
	}
}
