package server

import (
	"context"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// traceCalls is the door's middleware that makes a server span of every
// call, child of the trace context its request came with
// (tracing.FromHTTP): the span the command's message carries on.
func traceCalls(next ops.Handler) ops.Handler {
	return func(ctx context.Context, c *ops.Call, r *ops.Request, emit ops.Emit) (*ops.Response, error) {
		ctx, span := tracing.Start(ctx, c.Op().ID, trace.SpanKindServer,
			attribute.String("agentbus.transport", c.Caller().Transport), attribute.String("agentbus.operation", c.Op().ID))
		defer span.End()
		res, err := next(ctx, c, r, emit)
		if err != nil {
			code := errs.As(err).Code
			span.SetAttributes(attribute.String("agentbus.error.code", string(code)))
			if errs.StatusOf(code) >= 500 {
				span.SetStatus(codes.Error, string(code))
			}
		}
		return res, err
	}
}
