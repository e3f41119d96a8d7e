package follow

import (
	"context"

	"github.com/agentbus/agentbus/pkg/bus"
)

// SetQueue bounds the queues of the listeners that start following f
// from now on to events events and bytes of payload.
func SetQueue(f *Follower, events, bytes int) { f.queueEvents, f.queueBytes = events, bytes }

// ReadUntil has a listener of filter read the log from from up to until
// (exclusive), as one that joined the follower at until does, and returns
// where it stopped.
func ReadUntil(ctx context.Context, f *Follower, filter string, from, until uint64, fn func(*bus.Event)) uint64 {
	next := from
	f.read(ctx, &listener{filter: filter}, &next, fn, until)
	return next
}
