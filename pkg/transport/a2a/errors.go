package a2a

import (
	"context"
	"errors"
	"log/slog"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/transport/rest"
)

// errorOf is the one table mapping agentbus's error codes to A2A errors
// (the SDK turns each into its JSON-RPC code, HTTP+JSON status and
// ErrorInfo reason). Every code is in it (TestEveryCodeHasAnA2AError).
var errorOf = map[errs.Code]error{
	errs.CodeInvalidRequest:         a2a.ErrInvalidParams,
	errs.CodeValidationFailed:       a2a.ErrInvalidParams,
	errs.CodeMalformedJSON:          a2a.ErrInvalidParams,
	errs.CodeUnknownCommandType:     a2a.ErrInvalidParams,
	errs.CodeWebhookURLRejected:     a2a.ErrInvalidParams,
	errs.CodePayloadTooLarge:        a2a.ErrInvalidParams,
	errs.CodeUnsupportedMediaType:   a2a.ErrUnsupportedContentType,
	errs.CodeUnauthenticated:        a2a.ErrUnauthenticated,
	errs.CodeForbidden:              a2a.ErrUnauthorized,
	errs.CodeQuotaExceeded:          a2a.ErrUnauthorized,
	errs.CodeTraceNotFound:          a2a.ErrTaskNotFound,
	errs.CodeSchemaNotFound:         a2a.ErrServerError,
	errs.CodeRouteNotFound:          a2a.ErrMethodNotFound,
	errs.CodeMethodNotAllowed:       a2a.ErrMethodNotFound,
	errs.CodeAgentNotFound:          a2a.ErrServerError,
	errs.CodeServiceNotFound:        a2a.ErrServerError,
	errs.CodeSubscriptionNotFound:   a2a.ErrServerError,
	errs.CodeSubscriptionActive:     a2a.ErrServerError,
	errs.CodeTenantNotFound:         a2a.ErrServerError,
	errs.CodeAgentAlreadyRegistered: a2a.ErrServerError,
	errs.CodeServiceAlreadyExists:   a2a.ErrServerError,
	errs.CodeAgentAlreadyPaused:     a2a.ErrServerError,
	errs.CodeAgentNotPaused:         a2a.ErrServerError,
	errs.CodeAggregateExists:        a2a.ErrServerError,
	errs.CodeAggregateNotFound:      a2a.ErrServerError,
	errs.CodeConflict:               a2a.ErrServerError,
	errs.CodeCapabilityNotSupported: a2a.ErrUnsupportedOperation,
	errs.CodeRateLimited:            a2a.ErrServerError,
	errs.CodeUnavailable:            a2a.ErrServerError,
	errs.CodeInternal:               a2a.ErrInternalError,
}

// ErrorOf returns the A2A error an agentbus error code maps to
// (a2a.ErrInternalError for a code it does not know).
func ErrorOf(code errs.Code) error {
	if e, ok := errorOf[code]; ok {
		return e
	}
	return a2a.ErrInternalError
}

// toA2A turns an operation's error into the A2A error a caller sees: the
// mapped A2A error with agentbus's message, and as its details the spec's
// error body, {"code", "message", "details"} (rest.ErrorBody: bounded,
// violations listed). An error that is not an *errs.Error is internal: it
// is logged and shown as INTERNAL_ERROR only. An error of a caller who left
// is passed on as it is.
func toA2A(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return err
	}
	e := errs.As(err)
	if e.Code == errs.CodeInternal || e.Code == errs.CodeUnavailable {
		log.Error("A2A request failed", "err", err)
	}
	body := rest.ErrorBody(e).Error
	return a2a.NewError(ErrorOf(e.Code), body.Message).WithDetails(map[string]any{
		"code": string(body.Code), "message": body.Message, "details": body.Details,
	})
}
