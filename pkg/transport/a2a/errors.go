package a2a

import (
	"context"
	"errors"
	"log/slog"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/agentbus/agentbus/pkg/errs"
	"google.golang.org/grpc/codes"
)

// errorOf is the one table mapping agentbus's error codes to A2A errors
// (the SDK turns each into its JSON-RPC code, HTTP+JSON status and
// ErrorInfo reason) and to gRPC status codes. Every code is in it
// (TestEveryCodeHasAnA2AError). Where the SDK maps the A2A error to a
// gRPC code itself, the gRPC code is the SDK's, so that its client reads
// the A2A error back (TestGRPCCodesAgreeWithTheSDK); a server error
// (-32000), which the SDK makes Internal, gets the code that says what
// went wrong.
var errorOf = map[errs.Code]mapped{
	errs.CodeInvalidRequest:         {a2a.ErrInvalidParams, codes.InvalidArgument},
	errs.CodeValidationFailed:       {a2a.ErrInvalidParams, codes.InvalidArgument},
	errs.CodeMalformedJSON:          {a2a.ErrInvalidParams, codes.InvalidArgument},
	errs.CodeUnknownCommandType:     {a2a.ErrInvalidParams, codes.InvalidArgument},
	errs.CodeWebhookURLRejected:     {a2a.ErrInvalidParams, codes.InvalidArgument},
	errs.CodePayloadTooLarge:        {a2a.ErrInvalidParams, codes.InvalidArgument},
	errs.CodeUnsupportedMediaType:   {a2a.ErrUnsupportedContentType, codes.InvalidArgument},
	errs.CodeUnauthenticated:        {a2a.ErrUnauthenticated, codes.Unauthenticated},
	errs.CodeForbidden:              {a2a.ErrUnauthorized, codes.PermissionDenied},
	errs.CodeQuotaExceeded:          {a2a.ErrUnauthorized, codes.PermissionDenied},
	errs.CodeTraceNotFound:          {a2a.ErrTaskNotFound, codes.NotFound},
	errs.CodeSchemaNotFound:         {a2a.ErrServerError, codes.NotFound},
	errs.CodeRouteNotFound:          {a2a.ErrMethodNotFound, codes.Unimplemented},
	errs.CodeMethodNotAllowed:       {a2a.ErrMethodNotFound, codes.Unimplemented},
	errs.CodeAgentNotFound:          {a2a.ErrServerError, codes.NotFound},
	errs.CodeServiceNotFound:        {a2a.ErrServerError, codes.NotFound},
	errs.CodeSubscriptionNotFound:   {a2a.ErrServerError, codes.NotFound},
	errs.CodeSubscriptionActive:     {a2a.ErrServerError, codes.FailedPrecondition},
	errs.CodeTenantNotFound:         {a2a.ErrServerError, codes.NotFound},
	errs.CodeAgentAlreadyRegistered: {a2a.ErrServerError, codes.AlreadyExists},
	errs.CodeServiceAlreadyExists:   {a2a.ErrServerError, codes.AlreadyExists},
	errs.CodeAgentAlreadyPaused:     {a2a.ErrServerError, codes.FailedPrecondition},
	errs.CodeAgentNotPaused:         {a2a.ErrServerError, codes.FailedPrecondition},
	errs.CodeAggregateExists:        {a2a.ErrServerError, codes.AlreadyExists},
	errs.CodeAggregateNotFound:      {a2a.ErrServerError, codes.NotFound},
	errs.CodeConflict:               {a2a.ErrServerError, codes.Aborted},
	errs.CodeCapabilityNotSupported: {a2a.ErrUnsupportedOperation, codes.FailedPrecondition},
	errs.CodeRateLimited:            {a2a.ErrServerError, codes.ResourceExhausted},
	errs.CodeUnavailable:            {a2a.ErrServerError, codes.Unavailable},
	errs.CodeInternal:               {a2a.ErrInternalError, codes.Internal},
}

// mapped is an agentbus error code's A2A error and gRPC status code.
type mapped struct {
	a2a  error
	grpc codes.Code
}

// ErrorOf returns the A2A error an agentbus error code maps to
// (a2a.ErrInternalError for a code it does not know).
func ErrorOf(code errs.Code) error {
	if e, ok := errorOf[code]; ok {
		return e.a2a
	}
	return a2a.ErrInternalError
}

// toA2A turns an operation's error into the A2A error a caller sees: the
// mapped A2A error with agentbus's message, and as its details the spec's
// error body, {"code", "message", "details"} (errs.BodyOf: bounded,
// violations listed). An error that is not an *errs.Error is internal: it
// is logged and shown as INTERNAL_ERROR only. An error of a caller who left
// is passed on as it is. For a call over the gRPC binding it is the gRPC
// status of that A2A error (toGRPC), as the SDK's gRPC handler passes it
// on.
func toA2A(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return err
	}
	e := errs.Edge(log, err, "A2A request failed")
	body := errs.BodyOf(e).Error
	out := a2a.NewError(ErrorOf(e.Code), body.Message).WithDetails(map[string]any{
		"code": string(body.Code), "message": body.Message, "details": body.Details,
	})
	if c, _ := ctx.Value(callKey{}).(*call); c != nil && c.grpc {
		return toGRPC(out)
	}
	return out
}
