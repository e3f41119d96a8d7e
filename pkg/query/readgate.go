package query

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/throttle"
)

// Reads of the event log (pages of GET /events, with or without a
// correlation id, and traces) are bounded per caller and in all: every
// such read takes a place among the reads running (ReadLimits.Concurrent,
// PerCaller), and a large one — which may return more than largeEvents
// events, or whose type filters look through more than largeScan events —
// also takes one of the few places for large reads (Large,
// LargePerCaller), and its time is counted against its caller's share of
// large reads (LargeShare of the wall clock, with a burst of
// largeBurst). These keep a caller's history reads from taking the CPU,
// and the stream's locks, every other caller's small reads need: a page
// of a thousand events, or a pass of the subject index over a long log,
// costs milliseconds of one core, a small page at the end of the log a
// fraction of one. A read past any bound is refused at once with
// RATE_LIMITED and Retry-After, never queued, so a flood of reads costs its
// sender 429s and not the others their latency.

// ReadLimits bounds the reads of the event log. Zero values take the
// defaults noted.
type ReadLimits struct {
	// Concurrent bounds the reads running at once (default 16), and
	// PerCaller those of one caller (default 4).
	Concurrent, PerCaller int
	// Large bounds the large reads running at once (default 2), and
	// LargePerCaller those of one caller (default 1).
	Large, LargePerCaller int
	// LargeShare is the time one caller's large reads may take, per
	// second of the wall clock, on average (default 250ms: a quarter).
	LargeShare time.Duration
}

func (l *ReadLimits) defaults() {
	if l.Concurrent <= 0 {
		l.Concurrent = 16
	}
	if l.PerCaller <= 0 {
		l.PerCaller = 4
	}
	if l.Large <= 0 {
		l.Large = 2
	}
	if l.LargePerCaller <= 0 {
		l.LargePerCaller = 1
	}
	if l.LargeShare <= 0 {
		l.LargeShare = 250 * time.Millisecond
	}
}

// largeBurst is how many seconds of LargeShare a caller may use at once.
const largeBurst = 8

// What makes a read large: it may return more than largeEvents events, or
// its filters look through more than largeScan events in all (the events
// after its cursor that the type index does not hold, once per type
// filter).
const (
	largeEvents = 100
	largeScan   = 10000
)

// readRetryAfter is the Retry-After of a refused read, in seconds.
const readRetryAfter = 1

// share is what is left of a caller's time for large reads: seconds, at
// most largeBurst × the share per second, below zero after a read that took
// more than was left.
type share struct {
	left float64
	at   time.Time
}

// readGate holds the places of the reads running and what is left of each
// caller's share of large reads. Safe for concurrent use.
type readGate struct {
	mu sync.Mutex
	// all and large count the places of the reads running and of the
	// large ones.
	all, large *throttle.Slots
	rate       float64 // a caller's share of large reads: seconds per second
	shares     map[string]*share
	now        func() time.Time
}

func newReadGate(l ReadLimits) *readGate {
	l.defaults()
	return &readGate{
		all:   throttle.NewSlots(l.Concurrent, l.PerCaller),
		large: throttle.NewSlots(l.Large, l.LargePerCaller),
		rate:  l.LargeShare.Seconds(), shares: map[string]*share{}, now: time.Now,
	}
}

// shareOf returns caller's share, refilled up to now. Called with g.mu
// held.
func (g *readGate) shareOf(caller string, now time.Time) *share {
	sh, ok := g.shares[caller]
	if !ok {
		sh = &share{left: g.rate * largeBurst, at: now}
		g.shares[caller] = sh
	}
	sh.left = min(g.rate*largeBurst, sh.left+now.Sub(sh.at).Seconds()*g.rate)
	sh.at = now
	return sh
}

// refused is the RATE_LIMITED error of a read past a bound.
func refused(what string, callerFull bool, bound int) error {
	var e *errs.Error
	if callerFull {
		e = errs.New(errs.CodeRateLimited, "too many %s at once for this credential (at most %d); retry in %d s", what, bound, readRetryAfter)
	} else {
		e = errs.New(errs.CodeRateLimited, "too many %s at once; retry in %d s", what, readRetryAfter)
	}
	e.Details = map[string]any{"retryAfterSeconds": readRetryAfter}
	return e
}

// readTurn is one read's places. A nil *readTurn is an unbounded read (an
// anonymous or in-process caller): its methods do nothing.
type readTurn struct {
	g      *readGate
	caller string
	large  bool      // holds a large read's place
	since  time.Time // when it became large
}

// enter takes a place among the reads running for caller, or returns
// RATE_LIMITED. An anonymous caller ("": no credentials asked for, auth
// none) is not bounded, as its requests are not rate-limited: it gets a
// nil turn.
func (g *readGate) enter(caller string) (*readTurn, error) {
	if caller == "" {
		return nil, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if ok, full := g.all.Take(caller); !ok {
		return nil, refused("reads of the event log", full, g.all.PerCaller())
	}
	return &readTurn{g: g, caller: caller}, nil
}

// grow takes a large read's place for t, once, or returns RATE_LIMITED.
func (t *readTurn) grow() error {
	if t == nil || t.large {
		return nil
	}
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if sh := g.shareOf(t.caller, now); sh.left <= 0 {
		wait := max(1, int(math.Ceil(-sh.left/g.rate)))
		e := errs.New(errs.CodeRateLimited, "this credential's large reads of the event log took their share of the time (%s per second); retry in %d s",
			time.Duration(g.rate*float64(time.Second)), wait)
		e.Details = map[string]any{"retryAfterSeconds": wait}
		return e
	}
	if ok, full := g.large.Take(t.caller); !ok {
		return refused(fmt.Sprintf("large reads of the event log (that may return over %d events, or whose type filters look through over %d)", largeEvents, largeScan),
			full, g.large.PerCaller())
	}
	t.large, t.since = true, now
	return nil
}

// end gives back t's places.
func (t *readTurn) end() {
	if t == nil {
		return
	}
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.all.Give(t.caller)
	if !t.large {
		return
	}
	g.large.Give(t.caller)
	now := g.now()
	sh := g.shareOf(t.caller, now)
	sh.left -= now.Sub(t.since).Seconds()
	// A caller whose share is whole again and who reads nothing large is
	// forgotten.
	for c, sh := range g.shares {
		if g.large.Held(c) == 0 && sh.left+now.Sub(sh.at).Seconds()*g.rate >= g.rate*largeBurst {
			delete(g.shares, c)
		}
	}
}

// tailAge is how old the last sequence a read is sized by may be.
const tailAge = 100 * time.Millisecond

// tail keeps a log's last sequence, read again when older than tailAge:
// it sizes reads (large or not), so a few events more or less do not
// matter, and one request per tailAge is all it costs. While one caller
// reads it again, the others take the value it had. Safe for concurrent
// use.
type tail struct {
	log        bus.Log
	mu         sync.Mutex
	at         time.Time
	seq        uint64
	refreshing bool
}

// last returns the log's last sequence, at most tailAge old unless it is
// being read again.
func (t *tail) last(ctx context.Context) (uint64, error) {
	t.mu.Lock()
	if time.Since(t.at) < tailAge || t.refreshing && !t.at.IsZero() {
		defer t.mu.Unlock()
		return t.seq, nil
	}
	t.refreshing = true
	t.mu.Unlock()
	seq, err := t.log.LastSeq(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refreshing = false
	if err != nil {
		return 0, err
	}
	t.seq, t.at = max(t.seq, seq), time.Now()
	return t.seq, nil
}
