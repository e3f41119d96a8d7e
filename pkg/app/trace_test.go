package app_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/bus"
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

// TestTraceCommandIsTheTracedOne: the command sequence of a receipt built
// from events comes from their headers, which any publisher writes; a trace
// shows the command at that sequence only when it is the traced command.
func TestTraceCommandIsTheTracedOne(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	acc, msg := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "mine"}))
	seq := strconv.FormatUint(msg.Seq, 10)
	for _, c := range []struct{ tenant, corr string }{
		{"evil", "evil-probe-1"},  // another tenant's event
		{"default", "probe-2"},    // this tenant, another command
		{"default", acc.ID + "x"}, // close, but not it
	} {
		e.publishEvent("agentbus.evt."+c.tenant+"._._.Whatever",
			bus.Header{bus.HeaderCorrelationID: {c.corr}, bus.HeaderCommandSeq: {seq}}, map[string]any{})
		var tr *app.Trace
		deadline := time.Now().Add(5 * time.Second)
		for {
			var err error
			if tr, err = e.app.GetTrace(e.ctx(), c.tenant, c.corr); err == nil && len(tr.Events) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s/%s: no trace with its event: %+v %v", c.tenant, c.corr, tr, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if tr.Command.ID != "" || tr.Command.Source != "" || tr.Command.Time != "" {
			t.Errorf("%s/%s: trace shows command %+v, which is not its own", c.tenant, c.corr, tr.Command)
		}
	}
}
