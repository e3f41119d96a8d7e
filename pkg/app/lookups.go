package app

import (
	"context"
	"errors"
	"sync"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// lookups answers POST /commands' "was this command accepted before?" (does
// its receipt exist?) with group lookups. A lookup that finds none in
// flight reads its key alone, with a Get. Lookups that arrive while one is
// in flight queue, and the queue goes as one IndexKV.Absent when that one
// ends: almost always "none of these exists", which answers them all with
// one request. A request costs about the same whatever it carries (28 µs
// of CPU for one read in-process on two cores; 3.3 µs a key when 22 go in
// one): the busier the process, the more lookups one request answers, and
// an idle one waits for nothing. A group Absent cannot clear (a resubmission in it, an error)
// falls back to a Get per key, made by each waiting caller itself: what it
// cost before grouping, and one request more. Safe for concurrent use.
type lookups struct {
	kv      bus.IndexKV
	mu      sync.Mutex
	running bool      // a lookup is in flight
	queue   []*lookup // waiting for the next group
}

// lookup is one caller queued for a group.
type lookup struct {
	key    string
	done   chan struct{} // closed when absent is set
	absent bool
}

// exists reports whether key has an entry, with Get's errors.
func (l *lookups) exists(ctx context.Context, key string) (bool, error) {
	l.mu.Lock()
	if !l.running {
		l.running = true
		l.mu.Unlock()
		found, err := l.get(ctx, key)
		l.handOn(ctx)
		return found, err
	}
	w := &lookup{key: key, done: make(chan struct{})}
	l.queue = append(l.queue, w)
	l.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if w.absent {
		return false, nil
	}
	return l.get(ctx, key)
}

func (l *lookups) get(ctx context.Context, key string) (bool, error) {
	switch _, _, err := l.kv.Get(ctx, key); {
	case err == nil:
		return true, nil
	case errors.Is(err, errs.ErrNotFound):
		return false, nil
	default:
		return false, err
	}
}

// handOn ends a lookup made in the caller's goroutine: the lookups queued
// meanwhile go on in a goroutine of their own (a caller's request must not
// wait for others'), which ends once nothing waits.
func (l *lookups) handOn(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) == 0 {
		l.running = false
		return
	}
	go l.drain(context.WithoutCancel(ctx))
}

// drain answers the queue, one group of at most bus.MaxAbsentKeys at a
// time, until it is empty. Every queued caller is answered, whether or not
// it still waits.
func (l *lookups) drain(ctx context.Context) {
	for {
		l.mu.Lock()
		n := min(len(l.queue), bus.MaxAbsentKeys)
		if n == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		group := l.queue[:n:n]
		if l.queue = l.queue[n:]; len(l.queue) == 0 {
			l.queue = nil
		}
		l.mu.Unlock()
		absent := false
		if len(group) > 1 { // one alone reads its own key: Get is as cheap
			keys := make([]string, len(group))
			for i, w := range group {
				keys[i] = w.key
			}
			absent = l.kv.Absent(ctx, keys)
		}
		for _, w := range group {
			w.absent = absent
			close(w.done)
		}
	}
}
