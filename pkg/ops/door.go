package ops

import (
	"context"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
)

// The door: every transport (REST, MCP, A2A) runs an operation the same
// way. It authenticates its caller as its protocol says, then
//
//	call, err := ops.Admit(caller, tenant, op) // tenant, switched on, scope
//	res, err := call.Invoke(ctx, req)           // or call.Stream, call.Slot
//
// Admit is the only way to a Call, and a Call the only way a transport
// runs an operation, so no transport can skip a check or order them its
// own way. Invoke and Stream run through the Middleware the table was
// built with (Config.Middleware), the one place a call of any transport
// passes on its way to its handler.

// Caller is who calls the operations, as their transport authenticated
// them. The zero Caller is the caller of a server without authentication:
// anonymous, every tenant and scope allowed.
type Caller struct {
	// ID identifies the credential: an API key's id, also for the tokens
	// issued to it; "" for an anonymous caller. Reads and live streams are
	// bounded per ID.
	ID string
	// Allow returns nil when the credential may act on tenant with scope
	// ("" for the tenant alone), FORBIDDEN otherwise; nil allows all.
	Allow func(tenant string, scope Scope) error
	// Valid reports whether the credential still holds (UNAUTHENTICATED
	// once revoked or expired); nil when it cannot end. What outlives its
	// request (a live stream, a session) asks it by Hold's rule: every
	// StreamConfig.Recheck, and at Until.
	Valid func(context.Context) error
	// Until is when the credential expires (a bearer token's exp); zero
	// when it does not, or that is not known up front. A live stream
	// ends then (see Hold).
	Until time.Time
	// Transport names the transport the call came by ("rest", "mcp",
	// "a2a"; "" for a call made in process): a bounded label for what
	// observes calls at the door (Middleware, Config.Live).
	Transport string
}

// Via returns c as a caller that came by transport.
func (c Caller) Via(transport string) Caller {
	c.Transport = transport
	return c
}

// Credential is c's credential as a live stream checks it again.
func (c Caller) Credential() Credential { return Credential{Check: c.Valid, Until: c.Until} }

// Enter returns nil when c may address tenant at all, FORBIDDEN
// otherwise: the door's tenant check, for a transport that serves
// something of a tenant before it knows the operation (a session, a
// connection).
func (c Caller) Enter(tenant string) error {
	if c.Allow == nil {
		return nil
	}
	return c.Allow(tenant, "")
}

// Call is a call of one operation on one tenant that Admit let in.
type Call struct {
	caller Caller
	tenant string
	op     Operation
}

// Admit checks a call of op on tenant by caller, in this order, the same
// on every transport: the tenant (FORBIDDEN unless caller may address
// it), the operation switched on (CAPABILITY_NOT_SUPPORTED, whatever the
// caller's scope), the operation's scope (FORBIDDEN). It does not check
// that the tenant exists, nor the input.
func Admit(caller Caller, tenant string, op Operation) (*Call, error) {
	if err := caller.Enter(tenant); err != nil {
		return nil, err
	}
	if op.Disabled != "" {
		return nil, errs.New(errs.CodeCapabilityNotSupported, "%s", op.Disabled)
	}
	if caller.Allow != nil {
		if err := caller.Allow(tenant, op.Scope); err != nil {
			return nil, err
		}
	}
	return &Call{caller: caller, tenant: tenant, op: op}, nil
}

// Caller returns who makes the call.
func (c *Call) Caller() Caller { return c.caller }

// Tenant returns the tenant the call addresses.
func (c *Call) Tenant() string { return c.tenant }

// Op returns the operation called.
func (c *Call) Op() Operation { return c.op }

// Handler runs an admitted call: its operation's Handle, or, given emit,
// its Stream (which answers no Response).
type Handler func(ctx context.Context, c *Call, r *Request, emit Emit) (*Response, error)

// Middleware wraps the Handler every call of every transport runs
// through, outermost first in Config.Middleware: the place for what
// concerns every operation alike (metrics, tracing). It sees the call
// (caller, tenant, operation), the request and the outcome.
type Middleware func(next Handler) Handler

// door is what the operations of one Surface share at the door: the
// handler chain and the live streams' bounds.
type door struct {
	run Handler
	// enter takes one of the live streams a caller may hold open.
	enter func(caller string) (leave func(), err error)
	// open counts a live stream of a transport open, until closed (nil:
	// not counted).
	open func(transport string) (closed func())
}

func newDoor(mw []Middleware, enter func(caller string) (func(), error), open func(string) func()) *door {
	run := Handler(handle)
	for i := len(mw) - 1; i >= 0; i-- {
		run = mw[i](run)
	}
	return &door{run: run, enter: enter, open: open}
}

// handle is the innermost Handler: the operation itself.
func handle(ctx context.Context, c *Call, r *Request, emit Emit) (*Response, error) {
	if emit != nil {
		return nil, c.op.Stream(ctx, r, emit)
	}
	return c.op.Handle(ctx, r)
}

// prepare sets what the request says of its caller from the call.
func (c *Call) prepare(r *Request) *Request {
	if r == nil {
		r = &Request{}
	}
	if r.Params == nil {
		r.Params = map[string][]string{}
	}
	r.Tenant, r.Caller, r.Credential, r.Slot = c.tenant, c.caller.ID, c.caller.Credential(), c.Slot
	return r
}

// Invoke runs the operation with r, its Tenant, Caller and Credential set
// from the call, through the middleware: its handler's answer and errors.
func (c *Call) Invoke(ctx context.Context, r *Request) (*Response, error) {
	r = c.prepare(r)
	if c.op.door == nil { // a table built by hand, as some tests do
		return handle(ctx, c, r, nil)
	}
	return c.op.door.run(ctx, c, r, nil)
}

// Stream serves the operation live (Operation.Stream) with r, as Invoke
// runs it: CAPABILITY_NOT_SUPPORTED for an operation that does not
// stream.
func (c *Call) Stream(ctx context.Context, r *Request, emit Emit) error {
	if c.op.Stream == nil {
		return errs.New(errs.CodeCapabilityNotSupported, "%s is not served live", c.op.ID)
	}
	if emit == nil {
		emit = func(StreamItem) error { return nil }
	}
	r = c.prepare(r)
	var err error
	if c.op.door == nil {
		_, err = handle(ctx, c, r, emit)
	} else {
		_, err = c.op.door.run(ctx, c, r, emit)
	}
	return err
}

// Slot takes one of the live streams the caller may hold open
// (StreamConfig.Max on this replica, PerCaller per credential) and counts
// it open on the caller's transport (Config.Live), for a transport that
// follows the call's command or trace, and for listEvents followed live
// once its request is checked (Request.Slot). It returns the function
// that gives it back and ends the count (idempotent), or RATE_LIMITED
// when none is left.
func (c *Call) Slot() (leave func(), err error) {
	if c.op.door == nil {
		return func() {}, nil
	}
	give, err := c.op.door.enter(c.caller.ID)
	if err != nil || c.op.door.open == nil {
		return give, err
	}
	closed := c.op.door.open(c.caller.Transport)
	var once sync.Once
	return func() { once.Do(func() { give(); closed() }) }, nil
}
