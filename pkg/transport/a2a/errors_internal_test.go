package a2a

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	a2apb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/agentbus/agentbus/pkg/errs"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
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

// TestGRPCCodesAgreeWithTheSDK: where the SDK maps an A2A error to a gRPC
// code itself, the table's gRPC code is the SDK's, so that the SDK's
// client reads the A2A error back; server errors, which the SDK makes
// Internal, have codes of their own.
func TestGRPCCodesAgreeWithTheSDK(t *testing.T) {
	for c, m := range errorOf {
		_, err := a2agrpc.NewHandler(failing{err: m.a2a}).GetTask(context.Background(), &a2apb.GetTaskRequest{Id: "x"})
		sdk := status.Code(err)
		if errors.Is(m.a2a, a2a.ErrServerError) {
			if sdk != codes.Internal {
				t.Errorf("the SDK maps a server error to %s, not Internal: recheck %s", sdk, c)
			}
			continue
		}
		if m.grpc != sdk {
			t.Errorf("%s: the table says %s, the SDK maps %v to %s", c, m.grpc, m.a2a, sdk)
		}
	}
}

// TestToGRPCCarriesTheErrorBody: the status has the table's code and
// REST's error body as a Struct detail, violations and all, then the A2A
// ErrorInfo; the SDK's client reads the A2A error back.
func TestToGRPCCarriesTheErrorBody(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	err := toGRPC(toA2A(context.Background(), log, errs.Invalid("bad", []errs.Violation{{Path: "$.data.x", Message: "is required"}})))
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument || st.Message() != "bad" {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
	d := st.Details()
	if len(d) != 2 {
		t.Fatalf("details %v, want the body and the ErrorInfo", d)
	}
	body, _ := d[0].(*structpb.Struct)
	info, _ := d[1].(*errdetails.ErrorInfo)
	if body == nil || info == nil || info.Reason != a2a.ErrorReason(a2a.ErrInvalidParams) {
		t.Fatalf("details %v", d)
	}
	b := body.AsMap()
	v, _ := b["details"].(map[string]any)["violations"].([]any)
	if b["code"] != "VALIDATION_FAILED" || len(v) != 1 || v[0].(map[string]any)["path"] != "$.data.x" {
		t.Fatalf("body %v", b)
	}
	if st := status.Convert(toGRPC(toA2A(context.Background(), log, errs.New(errs.CodeRateLimited, "slow down")))); st.Code() != codes.ResourceExhausted {
		t.Fatalf("RATE_LIMITED as %s, want ResourceExhausted", st.Code())
	}
	if err := toGRPC(a2a.ErrTaskNotCancelable); err != a2a.ErrTaskNotCancelable {
		t.Fatalf("an SDK error was changed: %v", err)
	}
}

// failing is a request handler whose GetTask fails with err.
type failing struct {
	a2asrv.RequestHandler
	err error
}

func (f failing) GetTask(context.Context, *a2a.GetTaskRequest) (*a2a.Task, error) { return nil, f.err }
