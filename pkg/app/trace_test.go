package app_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/google/uuid"
)

// TestTraceScansAreBounded: the trace of an id without a receipt scans the
// pending commands; while every scan slot is taken a further request waits
// for its deadline and answers SERVICE_UNAVAILABLE, not a scan of its own.
func TestTraceScansAreBounded(t *testing.T) {
	e := newNatsEnv(t, nil)
	release := app.HoldScans(e.app)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := e.app.GetTrace(ctx, "default", uuid.NewString())
	var ae *errs.Error
	if !errors.As(err, &ae) || ae.Code != errs.CodeUnavailable {
		t.Fatalf("trace while every scan slot is taken: %v, want SERVICE_UNAVAILABLE", err)
	}
	release()
	_, err = e.app.GetTrace(e.ctx(), "default", uuid.NewString())
	if errors.As(err, &ae) && ae.Code == errs.CodeUnavailable {
		t.Fatalf("trace after the slots are free: %v", err)
	}
}
