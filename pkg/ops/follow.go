package ops

import (
	"context"
	"time"

	"github.com/agentbus/agentbus/pkg/push"
	"github.com/agentbus/agentbus/pkg/pushlog"
)

// Follower is what one live stream does with what it follows: the log
// (an SSE stream), one command (an A2A task stream) or the commands it
// watches (an MCP session). Follow calls its functions from one
// goroutine, one at a time.
type Follower struct {
	// Feed holds the events as they are published (nil: none).
	Feed *push.Feed
	// Listener names the stream in the pushes its events' commands'
	// traces list (pushlog); a zero Listener records none.
	Listener Listener
	// Event sends one event of the feed; more says another waits. It
	// returns the events it has written to the listener with this call:
	// ev once written, and any it held back before to write with ev (an
	// SSE stream writes events that come together at once); Follow
	// records each as a push of its command, and drops the slice. An
	// error ends the stream: what it held back is not recorded.
	Event func(ctx context.Context, ev *push.Event, more bool) (written []*push.Event, err error)
	// Read reads from the log what the feed does not hold and sends it:
	// first when ReadFirst, again after the feed fell behind (emptied
	// first), every Every, and ReadAfter after events. caught false reads
	// again at once (a read the read bounds refused, after its wait); done
	// ends the stream (nil). nil reads nothing.
	Read      func(ctx context.Context) (caught, done bool, err error)
	ReadFirst bool
	// Every, when positive, is how often Read is called besides.
	Every time.Duration
	// ReadAfter, when positive, calls Read that long after the feed hands
	// out events (once for all that come meanwhile).
	ReadAfter time.Duration
	// Beat, when Quiet is positive, is called after Quiet without an
	// event handed to Event or a Read (a heartbeat). An error ends the
	// stream.
	Quiet time.Duration
	Beat  func(ctx context.Context) error
}

// Follow runs one live stream on Hold's rule for the credential cred
// returns: the one loop every live stream runs. It returns when ctx ends
// (nil), Read says done (nil), Event, Read or Beat fail (their error), or
// the credential no longer holds (the UNAUTHENTICATED error, see Ended).
// Events the feed hands out while the stream ends are not sent.
func (s *Surface) Follow(ctx context.Context, cred func() Credential, f Follower) error {
	ctx, release := s.Hold(ctx, cred)
	defer release()
	var tick <-chan time.Time
	if f.Every > 0 {
		t := time.NewTicker(f.Every)
		defer t.Stop()
		tick = t.C
	}
	beat, soon := stopped(), stopped()
	defer beat.Stop()
	defer soon.Stop()
	quiet := func() {
		if f.Quiet > 0 {
			beat.Reset(f.Quiet)
		}
	}
	read, pending := f.ReadFirst, false
	quiet()
	for {
		if read && f.Read != nil {
			caught, done, err := f.Read(ctx)
			switch {
			case ctx.Err() != nil:
				return Ended(ctx)
			case err != nil:
				return err
			case done:
				return nil
			case !caught:
				continue
			}
		}
		if read {
			read = false
			quiet()
		}
		select {
		case <-ctx.Done():
			return Ended(ctx)
		case <-f.Feed.Lags():
			f.Feed.CatchUp()
			read = true
		case <-tick:
			read = true
		case <-soon.C:
			read, pending = true, false
		case <-beat.C:
			if err := f.Beat(ctx); err != nil {
				return err
			}
			quiet()
		case ev := <-f.Feed.Events():
			if ctx.Err() != nil { // ended while events wait
				return Ended(ctx)
			}
			written, err := f.Event(ctx, ev, len(f.Feed.C) > 0)
			if err != nil {
				return err
			}
			s.pushed(f.Listener, written)
			quiet()
			if f.ReadAfter > 0 && !pending {
				pending = true
				soon.Reset(f.ReadAfter)
			}
		}
	}
}

// pushed records the push of each event written to l (of a command: an
// event without a correlation id is in no trace).
func (s *Surface) pushed(l Listener, written []*push.Event) {
	if l.Transport == "" || len(written) == 0 {
		return
	}
	at := s.now()
	for _, ev := range written {
		if ev.CorrelationID != "" {
			s.pushes.Add(l.Tenant, ev.CorrelationID, pushlog.Record{Transport: l.Transport, EventID: ev.ID, EventType: ev.Type, At: at, Listener: l.Label})
		}
	}
}

// stopped returns a timer that has not been set.
func stopped() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// Listener names a live stream in the pushes a trace lists (pushlog).
type Listener = pushlog.Listener

// The transports of a Listener.
const (
	PushSSE = pushlog.SSE
	PushMCP = pushlog.MCP
	PushA2A = pushlog.A2A
)
