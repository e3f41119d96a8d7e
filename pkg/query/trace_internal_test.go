package query

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/localstore/localstoretest"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/pushlog"
	"github.com/google/uuid"
)

// TestTraceScansAreBounded: the trace of an id without a receipt scans the
// pending commands; while every scan slot is taken a further request waits
// for its deadline and answers SERVICE_UNAVAILABLE, not a scan of its own.
func TestTraceScansAreBounded(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	history := projection.NewHistory(localstoretest.Open(t, ""), nil, bus.Subjects{Prefix: "agentbus"}, log)
	if err := history.WaitThrough(t.Context(), 0, 0); err != nil { // nothing to hold: ready
		t.Fatal(err)
	}
	receipts := projection.NewReceipts(history, nil)
	rd := New(Config{}, Ports{Receipts: receipts}, log)
	for range cap(rd.scans) {
		rd.scans <- struct{}{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := rd.GetTrace(ctx, "default", uuid.NewString())
	var ae *errs.Error
	if !errors.As(err, &ae) || ae.Code != errs.CodeUnavailable {
		t.Fatalf("trace while every scan slot is taken: %v, want SERVICE_UNAVAILABLE", err)
	}
	<-rd.scans
	done, err := rd.scanTurn(t.Context())
	if err != nil {
		t.Fatalf("a turn once a slot is free: %v", err)
	}
	done()
}

// TestPushesOfEvents: a trace lists only the pushes of its own events; a
// record naming another event (sent by any publisher on the pushes
// subject) is left out.
func TestPushesOfEvents(t *testing.T) {
	events := []json.RawMessage{json.RawMessage(`{"id":"e1","type":"A"}`), json.RawMessage(`{"id":"e2","type":"B"}`)}
	pushes := []pushlog.Record{{EventID: "e1", Transport: pushlog.SSE}, {EventID: "forged", Transport: pushlog.MCP}, {EventID: "e2", Transport: pushlog.A2A}}
	got := pushesOfEvents(pushes, events)
	if len(got) != 2 || got[0].EventID != "e1" || got[1].EventID != "e2" {
		t.Fatalf("kept %+v, want the pushes of e1 and e2", got)
	}
}
