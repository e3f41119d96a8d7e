// Package op is what an operation's handler takes and answers, the same
// for every operation and transport: a Request and a Response. The
// operations table (pkg/ops) names them ops.Request and ops.Response;
// its handlers (pkg/ops/command, pkg/ops/read) take them from here.
package op

import (
	"context"
	"time"

	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// Request is a transport-neutral operation call.
type Request struct {
	Tenant string
	// Caller identifies the credential the request came with (an API
	// key's id, also for the tokens issued to it); "" for an anonymous
	// caller. Reads are bounded per caller.
	Caller string
	Params map[string][]string // by parameter name
	Body   []byte              // when the operation takes one
	// Credential is the caller's credential as far as what outlives the
	// request (a live stream) checks it again (ops.Surface.Hold).
	Credential Credential
	// Slot takes one of the live streams the caller may hold open, for a
	// handler that serves one (ops.Call.Slot): the function that gives it
	// back, or RATE_LIMITED. nil on a request that came not through the
	// door: no slot is taken then.
	Slot func() (leave func(), err error)
}

// Credential is what a live stream knows of the credential that opened
// it.
type Credential struct {
	// Check reports whether the credential still holds: UNAUTHENTICATED
	// once it is revoked or has expired. nil holds always (no
	// authentication).
	Check func(context.Context) error
	// Until is when the credential expires (a bearer token's exp); zero
	// when it does not, or when that is not known up front.
	Until time.Time
}

// Param returns the first value of the named parameter, or "".
func (r *Request) Param(name string) string {
	if v := r.Params[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Outcome is how an operation succeeded.
type Outcome int

// Outcomes.
const (
	// Done: the result is in Body (or Raw).
	Done Outcome = iota
	// Created: a resource was created; Body describes it, Location names it.
	Created
	// Queued: the work is accepted and goes on; Location names its trace.
	Queued
	// Empty: done, with nothing to say.
	Empty
)

// Response is a transport-neutral result. Body is marshalled as JSON unless
// Raw is set, which is sent as is with ContentType.
type Response struct {
	Outcome     Outcome
	Body        any
	Raw         []byte
	ContentType string
	Location    string // path of the created or tracked resource, relative to the tenant base
	// Private marks a body that holds a secret: nothing on the way may
	// keep a copy (REST answers with Cache-Control: no-store).
	Private bool
}

// Handle runs an operation.
type Handle func(ctx context.Context, r *Request) (*Response, error)

// CheckID refuses (VALIDATION_FAILED at "id") a path id that cannot name
// a registry record.
func CheckID(id string) error {
	if !envelope.ValidTokenID(id) {
		return errs.Invalid("invalid path parameter", []errs.Violation{{Path: "id", Message: "must be " + decide.IDRule}})
	}
	return nil
}

// SubscriptionNotFound is the error for a subscription id the registry
// does not hold.
func SubscriptionNotFound(id string) error {
	return errs.New(errs.CodeSubscriptionNotFound, "subscription %q does not exist", id)
}
