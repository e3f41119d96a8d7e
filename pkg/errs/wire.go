package errs

import (
	"log/slog"
	"slices"

	"github.com/agentbus/agentbus/pkg/text"
)

// statusOf is the one table mapping error codes to HTTP status. Every
// transport answers through it: REST as the status, MCP and A2A to tell a
// fault inside agentbus (5xx) from a refusal.
var statusOf = map[Code]int{
	CodeInvalidRequest:         400,
	CodeValidationFailed:       400,
	CodeMalformedJSON:          400,
	CodeUnknownCommandType:     400,
	CodeWebhookURLRejected:     400,
	CodeUnauthenticated:        401,
	CodeForbidden:              403,
	CodeQuotaExceeded:          403,
	CodeSchemaNotFound:         404,
	CodeRouteNotFound:          404,
	CodeAgentNotFound:          404,
	CodeServiceNotFound:        404,
	CodeTraceNotFound:          404,
	CodeSubscriptionNotFound:   404,
	CodeSubscriptionActive:     409,
	CodeTenantNotFound:         404,
	CodeMethodNotAllowed:       405,
	CodeAgentAlreadyRegistered: 409,
	CodeServiceAlreadyExists:   409,
	CodeAgentAlreadyPaused:     409,
	CodeAgentNotPaused:         409,
	CodeAggregateExists:        409,
	CodeAggregateNotFound:      404,
	CodeConflict:               409,
	CodePayloadTooLarge:        413,
	CodeUnsupportedMediaType:   415,
	CodeCapabilityNotSupported: 422,
	CodeRateLimited:            429,
	CodeInternal:               500,
	CodeUnavailable:            503,
}

// StatusOf returns the HTTP status of an error code (500 when unknown).
func StatusOf(code Code) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return 500
}

// Fault reports whether e is a fault inside agentbus (a 5xx status)
// rather than a refusal of the request: its cause is logged, never shown.
func (e *Error) Fault() bool { return StatusOf(e.Code) >= 500 }

// Edge returns err as the *Error its caller is shown (any error that is
// not an *Error becomes INTERNAL_ERROR, its cause hidden), and logs it at
// error level with msg and args when it is a Fault. A transport calls it
// once per failed request, where it writes the answer, so that a fault is
// logged once, at the edge, and nothing below logs and returns the same
// error.
func Edge(log *slog.Logger, err error, msg string, args ...any) *Error {
	e := As(err)
	if e.Fault() {
		log.Error(msg, append(args[:len(args):len(args)], "err", err)...)
	}
	return e
}

// Body is the spec's error body, the same on every transport: REST answers
// it, MCP and A2A carry it as their error's data.
type Body struct {
	Error struct {
		Code    Code           `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

// MaxViolations bounds the violations one error body lists (the rest are
// counted in details.violationsOmitted), so a hostile body cannot make a
// much larger answer.
const MaxViolations = 100

// The most of a request an error answer quotes: a value it echoes (a
// path, a media type, a parameter's name) is cut at MaxEcho bytes; and,
// whatever built them, a message at maxMessage and a violation's path and
// message at MaxEcho each.
const (
	MaxEcho    = 256
	maxMessage = 1024
)

// Clip cuts s to MaxEcho bytes, on a character boundary, marking the cut
// with "…": for a value of the request an error message quotes.
func Clip(s string) string { return clipTo(s, MaxEcho) }

func clipTo(s string, n int) string { return text.Clip(s, n) }

// BodyOf renders e as the spec's error body, its message and violations
// cut to a bounded size (MaxViolations, MaxEcho), details always an
// object. e is not changed.
func BodyOf(e *Error) *Body {
	var b Body
	b.Error.Code, b.Error.Message = e.Code, clipTo(e.Message, maxMessage)
	b.Error.Details = map[string]any{}
	for k, v := range e.Details {
		b.Error.Details[k] = v
	}
	if v := e.Violations; len(v) > 0 {
		if len(v) > MaxViolations {
			b.Error.Details["violationsOmitted"] = len(v) - MaxViolations
			v = v[:MaxViolations]
		}
		if slices.ContainsFunc(v, func(x Violation) bool { return len(x.Path) > MaxEcho || len(x.Message) > MaxEcho }) {
			v = slices.Clone(v)
			for i := range v {
				v[i].Path, v[i].Message = Clip(v[i].Path), Clip(v[i].Message)
			}
		}
		b.Error.Details["violations"] = v
	}
	return &b
}
