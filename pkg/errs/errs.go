// Package errs holds agentbus's error codes, the error type every layer
// returns, and what a caller is shown of one on every transport: the spec's
// error body (BodyOf), the HTTP status of each code (StatusOf), and the one
// rule for a fault inside agentbus (Edge: logged once, its cause never
// shown). MCP and A2A map codes to their protocols' errors through one
// table each, and carry the same body; nothing else decides what a caller
// sees.
package errs

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// Code is a machine-readable error code in upper snake case.
type Code string

// The error codes agentbus returns. StatusOf gives the HTTP status of each.
const (
	CodeInvalidRequest         Code = "INVALID_REQUEST"
	CodeValidationFailed       Code = "VALIDATION_FAILED"
	CodeMalformedJSON          Code = "MALFORMED_JSON"
	CodeUnsupportedMediaType   Code = "UNSUPPORTED_MEDIA_TYPE"
	CodePayloadTooLarge        Code = "PAYLOAD_TOO_LARGE"
	CodeUnknownCommandType     Code = "UNKNOWN_COMMAND_TYPE"
	CodeSchemaNotFound         Code = "SCHEMA_NOT_FOUND"
	CodeRouteNotFound          Code = "ROUTE_NOT_FOUND"
	CodeMethodNotAllowed       Code = "METHOD_NOT_ALLOWED"
	CodeCapabilityNotSupported Code = "CAPABILITY_NOT_SUPPORTED"
	CodeUnauthenticated        Code = "UNAUTHENTICATED"
	CodeForbidden              Code = "FORBIDDEN"
	CodeTenantNotFound         Code = "TENANT_NOT_FOUND"
	CodeRateLimited            Code = "RATE_LIMITED"
	CodeQuotaExceeded          Code = "QUOTA_EXCEEDED"
	CodeAgentNotFound          Code = "AGENT_NOT_FOUND"
	CodeAgentAlreadyRegistered Code = "AGENT_ALREADY_REGISTERED"
	CodeAgentAlreadyPaused     Code = "AGENT_ALREADY_PAUSED"
	CodeAgentNotPaused         Code = "AGENT_NOT_PAUSED"
	CodeServiceNotFound        Code = "SERVICE_NOT_FOUND"
	CodeServiceAlreadyExists   Code = "SERVICE_ALREADY_REGISTERED"
	CodeTraceNotFound          Code = "TRACE_NOT_FOUND"
	CodeWebhookURLRejected     Code = "WEBHOOK_URL_REJECTED"
	CodeSubscriptionNotFound   Code = "SUBSCRIPTION_NOT_FOUND"
	CodeSubscriptionActive     Code = "SUBSCRIPTION_ALREADY_ACTIVE"
	CodeAggregateExists        Code = "AGGREGATE_ALREADY_EXISTS"
	CodeAggregateNotFound      Code = "AGGREGATE_NOT_FOUND"
	CodeConflict               Code = "CONFLICT"
	CodeUnavailable            Code = "SERVICE_UNAVAILABLE"
	CodeInternal               Code = "INTERNAL_ERROR"
)

// codes lists every code above (TestKnownHoldsEveryCode keeps it whole;
// the status table is checked against it).
var codes = []Code{
	CodeInvalidRequest, CodeValidationFailed, CodeMalformedJSON,
	CodeUnsupportedMediaType, CodePayloadTooLarge, CodeUnknownCommandType,
	CodeSchemaNotFound, CodeRouteNotFound, CodeMethodNotAllowed,
	CodeCapabilityNotSupported, CodeUnauthenticated, CodeForbidden,
	CodeTenantNotFound, CodeRateLimited, CodeQuotaExceeded, CodeAgentNotFound,
	CodeAgentAlreadyRegistered, CodeAgentAlreadyPaused, CodeAgentNotPaused,
	CodeServiceNotFound, CodeServiceAlreadyExists, CodeTraceNotFound,
	CodeWebhookURLRejected,
	CodeAggregateExists, CodeAggregateNotFound, CodeConflict,
	CodeUnavailable, CodeInternal, CodeSubscriptionNotFound,
	CodeSubscriptionActive,
}

// Codes returns every error code agentbus has.
func Codes() []Code { return slices.Clone(codes) }

// Known reports whether c is one of agentbus's codes (a code read from
// outside, such as a processor's rejection, may be anything).
func (c Code) Known() bool { return slices.Contains(codes, c) }

// Violation is one problem found in a request, located by a JSON path
// ("$.data.quantity") or a parameter name.
type Violation struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Error is the error every agentbus operation returns for a caller-visible
// failure. Message is safe to show to the caller; Err, when set, is the
// underlying cause and is logged, never shown.
type Error struct {
	Code       Code
	Message    string
	Violations []Violation
	Details    map[string]any
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code, so
// errors.Is(err, errs.New(errs.CodeAgentNotFound, "")) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// New returns an *Error with code and message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid returns a CodeValidationFailed error listing every violation.
func Invalid(message string, violations []Violation) *Error {
	return &Error{Code: CodeValidationFailed, Message: message, Violations: violations}
}

// Internal wraps err as an internal error whose message hides the cause.
// A cause that is ErrUnavailable becomes a SERVICE_UNAVAILABLE error
// instead, telling the caller to retry.
func Internal(err error) *Error {
	if errors.Is(err, ErrUnavailable) {
		e := Unavailable("the message store is briefly unavailable; retry shortly")
		e.Err = err
		return e
	}
	return &Error{Code: CodeInternal, Message: "internal error", Err: err}
}

// Unavailable is a SERVICE_UNAVAILABLE error telling the caller to retry
// after a second (details.retryAfterSeconds).
func Unavailable(message string) *Error {
	return &Error{Code: CodeUnavailable, Message: message, Details: map[string]any{"retryAfterSeconds": 1}}
}

// RetryAfter is details.retryAfterSeconds in whole seconds, as a
// Retry-After header gives it, when the error says when to retry.
func (e *Error) RetryAfter() (string, bool) {
	v, ok := e.Details["retryAfterSeconds"]
	if !ok {
		return "", false
	}
	secs, ok := v.(int) // as errs.Unavailable and the rate limiter set it
	if !ok {
		return "", false
	}
	return strconv.Itoa(secs), true
}

// As returns err as an *Error; any other error becomes an internal error.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return Internal(err)
}

// CodeOf returns the code of err, or "" when err is not an *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Sentinel errors of the storage port, translated from the broker's own
// errors by the adapter that talks to it.
var (
	// ErrConflict: an optimistic-concurrency expectation did not hold.
	ErrConflict = errors.New("conflict: expected last sequence did not match")
	// ErrDuplicate: the message id was already stored.
	ErrDuplicate = errors.New("duplicate message id")
	// ErrNotFound: no such key or message.
	ErrNotFound = errors.New("not found")
	// ErrUnavailable: the store did not answer in time or has no leader
	// right now; the operation may be retried.
	ErrUnavailable = errors.New("message store unavailable")
	// ErrTooLarge: the message is larger than the store takes; retrying
	// cannot help.
	ErrTooLarge = errors.New("message larger than the store takes")
	// ErrLimit: the store refuses because one of its limits is reached
	// (a stream's number of consumers); retrying helps only once
	// something is removed.
	ErrLimit = errors.New("a limit of the message store is reached")
)
