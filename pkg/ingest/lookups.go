package ingest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// lookups answers POST /commands' "was this command accepted before?" (does
// its receipt exist?) with group lookups. A lookup that finds none in
// flight reads its key alone, with a Get. Lookups that arrive while one is
// in flight queue, and the queue goes as one IndexKV.Found when that one
// ends: almost always "none of these exists", which answers them all with
// one request. A request's fixed cost is most of it (docs/decisions.md,
// "Those lookups go in groups"): the busier the process, the more lookups
// one request answers, and an idle one waits for nothing.
//
// A key Found names (a resubmission, or a delete marker) is read by its
// caller with a Get, and the group asked again without it, at most
// maxFound times; what is left then, and a group whose read failed, is
// read key by key, each by its caller. A caller waits for its group at
// most wait, then reads its key itself, so one slow request (a failover)
// does not hold up the lookups queued behind it for longer than that.
// Safe for concurrent use.
type lookups struct {
	kv      bus.IndexKV
	wait    time.Duration // 0: lookupWait
	mu      sync.Mutex
	running bool      // a lookup or a group is in flight
	queue   []*lookup // waiting for the next group
}

// lookup is one caller queued for a group.
type lookup struct {
	key    string
	done   chan struct{} // closed when absent is set
	absent bool
}

// lookupWait bounds a queued lookup's wait for its group; maxFound the
// Found requests one group takes.
const (
	lookupWait = time.Second
	maxFound   = 4
)

// exists reports whether key has an entry, with Get's errors.
func (l *lookups) exists(ctx context.Context, key string) (bool, error) {
	l.mu.Lock()
	if !l.running {
		l.running = true
		l.mu.Unlock()
		defer l.handOn(ctx)
		return l.get(ctx, key)
	}
	w := &lookup{key: key, done: make(chan struct{})}
	l.queue = append(l.queue, w)
	l.mu.Unlock()
	wait := l.wait
	if wait == 0 {
		wait = lookupWait
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.done:
		if w.absent {
			return false, nil
		}
	case <-timer.C:
	case <-ctx.Done():
		return false, ctx.Err()
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
	// The first caller's context, without its end: the groups are everyone's
	// (nothing below reads its values).
	go l.drain(context.WithoutCancel(ctx))
}

// drain answers the queue, one group of at most bus.MaxGroupKeys at a
// time, until it is empty. Every queued caller is answered, whether or not
// it still waits.
func (l *lookups) drain(ctx context.Context) {
	for {
		l.mu.Lock()
		n := min(len(l.queue), bus.MaxGroupKeys)
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
		l.answer(ctx, group)
	}
}

// answer clears the keys of group that Found says have no entry; the
// others' callers read their keys themselves. One alone reads its own key
// at once: a Get is as cheap.
func (l *lookups) answer(ctx context.Context, group []*lookup) {
	left := group
	for range maxFound {
		if len(left) < 2 {
			break
		}
		keys := make([]string, len(left))
		for i, w := range left {
			keys[i] = w.key
		}
		found, err := l.kv.Found(ctx, keys)
		if err != nil {
			break
		}
		rest := left[:0:0]
		for _, w := range left {
			switch {
			case found == "":
				w.absent = true
				close(w.done)
			case w.key == found:
				close(w.done) // read by its caller
			default:
				rest = append(rest, w)
			}
		}
		left = rest
	}
	for _, w := range left {
		close(w.done)
	}
}
