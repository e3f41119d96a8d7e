package ops

import (
	"context"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops/op"
)

// MaxRecheck is the longest a live stream goes without checking its
// credential again (StreamConfig.Recheck).
const MaxRecheck = 15 * time.Second

// Credential is what a live stream knows of the credential that opened
// it (op.Credential).
type Credential = op.Credential

// Hold returns a context for a live stream (an SSE stream, an MCP
// session's push, an A2A task stream) of the credential cred returns, and
// the function that releases it once the stream ends. It is the one rule
// by which every live stream checks its credential again: the context
// ends, with the UNAUTHENTICATED error as its cause (see Ended), once the
// credential no longer holds, checked every StreamConfig.Recheck however
// busy the stream is, and at once at the credential's Until. cred is asked
// again at each check, so a session whose later requests renewed its
// credential is judged on the newest. An error of Check other than
// UNAUTHENTICATED (a key store that cannot be read) ends nothing. Safe for
// concurrent use.
func (s *Surface) Hold(ctx context.Context, cred func() Credential) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	h := &hold{ctx: ctx, cancel: cancel, cred: cred, every: s.cfg.Streams.Recheck}
	h.arm()
	return ctx, func() {
		cancel(context.Canceled)
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.timer != nil {
			h.timer.Stop()
		}
	}
}

// Ended is how a live stream run on a Hold context reports its end once
// ctx is done: the UNAUTHENTICATED error that ended it, or nil when it was
// ended by its reader or a shutdown.
func Ended(ctx context.Context) error {
	if err := context.Cause(ctx); ctx.Err() != nil && errs.CodeOf(err) == errs.CodeUnauthenticated {
		return err
	}
	return nil
}

// hold checks one stream's credential on a timer, never on the stream's
// goroutine.
type hold struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	cred   func() Credential
	every  time.Duration

	mu    sync.Mutex
	timer *time.Timer
}

// arm sets the next check: after every, or at the credential's expiry
// when that comes first.
func (h *hold) arm() {
	next := h.every
	if until := h.cred().Until; !until.IsZero() {
		next = max(0, min(next, time.Until(until)))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() == nil {
		h.timer = time.AfterFunc(next, h.check)
	}
}

// expired is the end of a stream whose credential's expiry has passed
// when its Check did not say so.
func expired() error {
	e := errs.New(errs.CodeUnauthenticated, "the credential expired")
	e.Details = map[string]any{"reason": "expired"}
	return e
}

func (h *hold) check() {
	if h.ctx.Err() != nil {
		return
	}
	c := h.cred()
	if c.Check != nil {
		ctx, cancel := context.WithTimeout(h.ctx, h.every)
		err := c.Check(ctx)
		cancel()
		if errs.CodeOf(err) == errs.CodeUnauthenticated {
			h.cancel(err)
			return
		}
	}
	if !c.Until.IsZero() && !time.Now().Before(c.Until) {
		h.cancel(expired())
		return
	}
	h.arm()
}
