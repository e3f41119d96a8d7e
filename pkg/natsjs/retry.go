package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// opTimeout bounds one store operation; tryTimeout one attempt of it,
// which is retried within opTimeout when it got no answer.
const (
	opTimeout  = 5 * time.Second
	tryTimeout = time.Second
)

// applyTryTimeout bounds one create-or-update request at start;
// applyFirstTry the first of them, each later try getting twice the last
// up to applyTryTimeout. A cluster drops some requests while it settles
// (one sent as its leader is elected; a create of a stream another
// replica's create of it is still placing, which only that replica hears
// answered), so a short first try finds the answer sooner, while a slow
// placement still gets its time; a repeated create-or-update is harmless.
const (
	applyTryTimeout = 10 * time.Second
	applyFirstTry   = time.Second
)

// retry says how an operation is retried: each try gets its own deadline
// (one lost request must not use up the whole budget) and is repeated,
// after pause, while retryable says so and the budget (0: none, only ctx)
// lasts.
type retry struct {
	budget, try, pause time.Duration
	// first, when set, is the first try's length, doubled at each try up
	// to try.
	first     time.Duration
	retryable func(error) bool
}

var (
	// storeRetry is the policy of reads and id-carrying appends: retried on
	// "no answer now" for at most opTimeout.
	storeRetry = retry{budget: opTimeout, try: tryTimeout, pause: 50 * time.Millisecond, retryable: transient}
	// settleRetry is the policy of the start-up requests (apply, check):
	// retried until ctx ends while the server is still settling.
	settleRetry = retry{try: applyTryTimeout, first: applyFirstTry, pause: 200 * time.Millisecond, retryable: settling}
	// writeOnce is the policy of a write that must not be repeated once it
	// may have been stored (no message id to recognise it by): one attempt
	// within opTimeout, repeated only when no stream answered at all (the
	// message reached none), as nats.go's publish does.
	writeOnce = retry{budget: opTimeout, try: opTimeout, pause: 250 * time.Millisecond, retryable: noStream}
)

// noStream reports an answer meaning no stream took the message.
func noStream(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// do runs op until it succeeds, fails for a reason that is not retryable,
// or the budget or ctx runs out, and returns op's last error. Each try
// gets a context that ends with it.
func (r retry) do(ctx context.Context, op func(ctx context.Context) error) error {
	return r.run(ctx, func(try time.Duration) error {
		tctx, cancel := context.WithTimeout(ctx, try)
		defer cancel()
		return op(tctx)
	})
}

// run is do for an op that bounds each try itself: it gets the try's
// length (see request).
func (r retry) run(ctx context.Context, op func(try time.Duration) error) error {
	var end time.Time
	if r.budget > 0 {
		end = time.Now().Add(r.budget)
	}
	next := r.first
	for {
		try := r.try
		if next > 0 {
			try, next = min(next, r.try), 2*next
		}
		if !end.IsZero() {
			try = min(try, time.Until(end))
		}
		err := op(try)
		if err == nil || !r.retryable(err) || ctx.Err() != nil || (!end.IsZero() && time.Until(end) <= 0) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(r.pause):
		}
	}
}

// errNotConnected is a request not sent because the connection is known
// to be down (reconnecting, or disconnected): sent, it would only wait in
// nats.go's reconnect buffer. It is not retried within an operation (each
// try would meet the same), and translates to errs.ErrUnavailable, so that
// a caller hears "unavailable" at once rather than after the retry budget.
var errNotConnected = errors.New("not connected to NATS")

// down reports a connection known to be down: one that lost its server
// and has not found one again.
func down(nc *nats.Conn) bool {
	switch nc.Status() {
	case nats.RECONNECTING, nats.DISCONNECTED:
		return true
	}
	return false
}

// request sends m and waits at most try (or until ctx's deadline, when
// sooner) for the answer. It is RequestMsgWithContext without the context
// of its own every try would need: no timer or child context per request
// on the hot path (every command's receipt lookup, command append, event
// append and receipt write). ctx is checked before sending; a cancel after
// that is not waited on past try. A connection known to be down sends
// nothing: errNotConnected (a try that began connected waits its answer
// as ever, and is retried by its policy if the connection drops meanwhile).
func request(ctx context.Context, nc *nats.Conn, m *nats.Msg, try time.Duration) (*nats.Msg, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if down(nc) {
		return nil, fmt.Errorf("%w (%s)", errNotConnected, nc.Status())
	}
	if dl, ok := ctx.Deadline(); ok {
		if try = min(try, time.Until(dl)); try <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	return nc.RequestMsg(m, try)
}

// withRetry runs a store operation under storeRetry.
func withRetry(ctx context.Context, op func(ctx context.Context) error) error {
	return storeRetry.do(ctx, op)
}

// untilSettled runs a create-or-update (or another start-up request) under
// settleRetry. A server that is still settling answers late, not at all, or
// with a temporary refusal: a new cluster electing its leaders (replicas
// racing to create the same stream at first start), or a fresh server still
// setting up the account's store directory.
func untilSettled(ctx context.Context, op func(ctx context.Context) error) error {
	return settleRetry.do(ctx, op)
}

// transient reports errors that mean "no answer now" (a timeout, no
// leader during an election, a reconnect), as opposed to a refusal. A
// closed connection is not transient: it never reopens (translate still
// maps it to errs.ErrUnavailable).
func transient(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeClusterNotAvail
}

// closed reports a connection closed for good.
func closed(err error) bool {
	return errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed)
}

// unreachable reports a request the connection could not send: closed,
// or down for now (errNotConnected).
func unreachable(err error) bool { return closed(err) || errors.Is(err, errNotConnected) }

// Server answers that mean "not yet" while a server or cluster settles.
const (
	errCodeClusterNotAvail = 10008 // JetStream system temporarily unavailable (503)
	errCodeNoSuitablePeers = 10005 // no suitable peers for placement: a cluster still forming
	errCodeStreamCreate    = 10049 // stream create failed (500), any reason; "error creating store for stream" is a fresh server's
)

// NotYet reports an error of starting agentbus that a later try may not
// meet: no server accepting connections yet, no answer in time, or a
// server or cluster still settling (electing its leaders, placing
// streams). Start-up retries after it; any other error is for the
// operator to fix.
func NotYet(err error) bool {
	return errors.Is(err, nats.ErrNoServers) || errors.Is(err, errs.ErrUnavailable) || unreachable(err) || settling(err)
}

// settling reports errors worth retrying at start-up: transient ones and
// the server's temporary refusals, decided by their JetStream error code.
func settling(err error) bool {
	if transient(err) || errors.Is(err, errNotConnected) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeNoSuitablePeers:
		return true
	case errCodeStreamCreate: // a catch-all: only a store still being set up is "not yet"
		return strings.Contains(apiErr.Description, "error creating store")
	}
	return false
}
