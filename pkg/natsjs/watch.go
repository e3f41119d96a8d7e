package natsjs

import (
	"context"
	"fmt"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/nats-io/nats.go/jetstream"
)

var _ bus.KVWatcher = (*KV)(nil)

// Watch implements bus.KVWatcher with a KV watcher (an ordered consumer,
// recreated by nats.go after a disconnect, so no change is missed). It
// returns once every current value matching pattern was passed to fn, or
// with an error when ctx ends first.
func (k *KV) Watch(ctx context.Context, pattern string, fn func(bus.KVChange)) error {
	w, err := k.kv.Watch(ctx, pattern)
	if err != nil {
		return fmt.Errorf("watch %s: %w", pattern, err)
	}
	ready, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = w.Stop() }()
		initial := true
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil { // every current value has been delivered
					if initial {
						initial = false
						close(ready)
					}
					continue
				}
				ch := bus.KVChange{Key: e.Key(), Revision: e.Revision()}
				if e.Operation() == jetstream.KeyValueDelete || e.Operation() == jetstream.KeyValuePurge {
					ch.Deleted = true
				} else {
					ch.Value = e.Value()
				}
				fn(ch)
			}
		}
	}()
	select {
	case <-ready:
		return nil
	case <-done:
		return fmt.Errorf("watch %s: the watcher stopped before delivering the current values", pattern)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// KeysBucket is the name of the API key bucket streams/30-keys.yaml makes
// for prefix.
func KeysBucket(prefix string) string { return upperPrefix(prefix) + "_KEYS" }
