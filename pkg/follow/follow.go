// Package follow is the replica's one follower of the event log: it reads
// each event once, reads its subject and headers once (bus.Event), and
// hands it to every listener whose filter takes it — the registries, the
// type index, the push hub, the webhook dispatcher's window of recent
// events — each on its own goroutine, in stream order. It implements
// bus.Tail; the listeners know only that port, and nothing imports this
// package but the wiring.
//
// Each listener keeps its own position. One that starts behind the
// follower (a registry replayed up to some event, the type index from the
// log's first event) reads the log by itself until it reaches the
// follower, then joins it. A listener takes what the follower hands it
// through a bounded queue (QueueEvents events, QueueBytes of payload): the
// follower never waits for a listener. When the queue is full the
// listener falls behind: the follower stops handing it events, it takes
// what its queue holds, reads from the log what it missed, and joins
// again. A slow listener so costs its own reads of the log, never the
// others' events.
package follow

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
)

// Bounds of a listener's queue, and of one read of the log by a listener
// that catches up.
const (
	QueueEvents = 4096
	QueueBytes  = 16 << 20
	readBatch   = 500
	// retryRead is how long a listener waits after a failed read.
	retryRead = 100 * time.Millisecond
)

// Follower reads the event log once and hands each event to its
// listeners. Safe for concurrent use.
type Follower struct {
	live, catchUp bus.Log
	subj          bus.Subjects
	log           *slog.Logger
	started       chan struct{}
	// queueEvents and queueBytes bound each listener's queue.
	queueEvents, queueBytes int

	mu sync.Mutex
	// next is the sequence of the next event the follower hands out:
	// every listener joined before it takes events from it on.
	next      uint64
	listeners []*listener // in the order they started following
}

var _ bus.Tail = (*Follower)(nil)

// New returns a follower of the event log live; listeners that catch up
// read catchUp (the same log, possibly on other connections). It hands
// out nothing before Start.
func New(live, catchUp bus.Log, subj bus.Subjects, log *slog.Logger) *Follower {
	return &Follower{live: live, catchUp: catchUp, subj: subj, log: log, started: make(chan struct{}),
		queueEvents: QueueEvents, queueBytes: QueueBytes}
}

// Start follows the log from its end until ctx ends, and returns once it
// follows, or with the error of reading the log's end. Listeners whose
// position is before the end read the log up to it themselves.
func (f *Follower) Start(ctx context.Context) error {
	last, err := f.live.LastSeq(ctx)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.next = last + 1
	f.mu.Unlock()
	close(f.started)
	// The whole stream (">"): the server counts what is pending after a
	// full wildcard without a pass over the messages.
	f.live.Follow(ctx, ">", last+1, f.fanOut)
	return nil
}

// fanOut hands m, the log's next event, to the listeners that take it, in
// the order they started following.
func (f *Follower) fanOut(m *bus.Message) {
	ev := bus.NewEvent(f.subj, m)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next = m.Seq + 1
	for _, l := range f.listeners {
		if bus.SubjectMatches(m.Subject, l.filter) {
			l.offer(ev)
		}
	}
}

// Follow implements bus.Tail: fn is called from a goroutine of the
// listener's own, which reads the log by itself while it is behind the
// follower (see the package comment). Before Start it waits.
func (f *Follower) Follow(ctx context.Context, filter string, from uint64, fn func(*bus.Event)) {
	l := &listener{filter: filter, wake: make(chan struct{}, 1), maxEvents: f.queueEvents, maxBytes: f.queueBytes}
	f.mu.Lock()
	f.listeners = append(f.listeners, l) // not joined yet: handed nothing
	f.mu.Unlock()
	go func() {
		defer func() {
			f.mu.Lock()
			f.listeners = slices.DeleteFunc(f.listeners, func(x *listener) bool { return x == l })
			f.mu.Unlock()
		}()
		select {
		case <-f.started:
		case <-ctx.Done():
			return
		}
		f.run(ctx, l, max(from, 1), fn)
	}()
}

// run hands the listener its events from next on until ctx ends: from the
// log while it is behind the follower, from its queue while it is not.
func (f *Follower) run(ctx context.Context, l *listener, next uint64, fn func(*bus.Event)) {
	for ctx.Err() == nil {
		// Far behind, read the log without holding a queue; near the
		// follower, join it, then read the log up to where the queue
		// starts.
		if next < f.position() {
			if !f.read(ctx, l, &next, fn, 0) {
				return
			}
		}
		at := f.join(l)
		if !f.read(ctx, l, &next, fn, at) {
			return
		}
		for {
			ev, ok := l.take(ctx)
			if !ok {
				if ctx.Err() == nil && f.log != nil {
					f.log.Debug("following the event log: a listener fell behind; it reads the log", "filter", l.filter, "from", next)
				}
				break // behind, or ctx ended
			}
			if ev.Seq < next {
				continue // read from the log already
			}
			fn(ev)
			next = ev.Seq + 1
		}
	}
}

// position returns the sequence of the next event the follower hands out.
func (f *Follower) position() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.next
}

// join puts l in the fan-out with an empty queue, and returns the
// sequence of the first event it will be handed.
func (f *Follower) join(l *listener) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.joined, l.behind = true, false
	clear(l.queue)
	l.queue, l.bytes = l.queue[:0], 0
	return f.next
}

// read hands l the events of the log matching its filter from *next on:
// up to until (exclusive) when until is not 0, else until a read comes
// back short of its bounds (the follower is near). A read up to until
// asks for no more than the events before it: those from until on are in
// l's queue already. It returns false when ctx ended.
func (f *Follower) read(ctx context.Context, l *listener, next *uint64, fn func(*bus.Event), until uint64) bool {
	for until == 0 || *next < until {
		batch := readBatch
		if until != 0 {
			batch = int(min(uint64(readBatch), until-*next))
		}
		msgs, err := f.catchUp.Range(ctx, l.filter, *next, batch)
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			if f.log != nil {
				f.log.Warn("following the event log: a listener's read failed; trying again", "filter", l.filter, "from", *next, "err", err)
			}
			select {
			case <-ctx.Done():
				return false
			case <-time.After(retryRead):
			}
			continue
		}
		for _, m := range msgs {
			if until != 0 && m.Seq >= until {
				return ctx.Err() == nil // the rest is in the queue
			}
			fn(bus.NewEvent(f.subj, m))
			*next = m.Seq + 1
		}
		if !bus.Full(msgs, batch) {
			break // nothing more is stored now: the rest comes from the queue
		}
	}
	return ctx.Err() == nil
}

// listener is one Follow: its filter and its queue.
type listener struct {
	filter string
	wake   chan struct{} // a token when the queue gains an event or falls behind

	mu sync.Mutex
	// joined says the follower hands it events; behind that it stopped,
	// the queue being full, until the next join.
	joined, behind bool
	queue          []*bus.Event
	bytes          int // payload bytes in queue
	// maxEvents and maxBytes bound the queue.
	maxEvents, maxBytes int
}

// offer queues ev, unless l is not joined or behind; a full queue makes
// it behind. It never blocks.
func (l *listener) offer(ev *bus.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.joined || l.behind {
		return
	}
	if len(l.queue) >= l.maxEvents || (len(l.queue) > 0 && l.bytes+len(ev.Data) > l.maxBytes) {
		l.behind = true
	} else {
		l.queue = append(l.queue, ev)
		l.bytes += len(ev.Data)
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// take returns the next queued event, waiting for one; false once the
// queue is empty and l is behind, or when ctx ended.
func (l *listener) take(ctx context.Context) (*bus.Event, bool) {
	for {
		l.mu.Lock()
		if len(l.queue) > 0 {
			ev := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			l.bytes -= len(ev.Data)
			l.mu.Unlock()
			return ev, true
		}
		behind := l.behind
		l.mu.Unlock()
		if behind {
			return nil, false
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-l.wake:
		}
	}
}
