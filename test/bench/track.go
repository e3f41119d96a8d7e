package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// tracker watches the events of a known set of commands on the event
// subjects, agentbus.evt.>, matching each to its command by the
// Agentbus-Correlation-Id header. A command is "visible" the moment its
// first event is seen going into the event log (as published or as
// stored: visibleMode). agentbus publishes no receipt of a command:
// each replica's history follows the event log to answer GET
// /events?correlationId=, as the bare reference pipeline's receipt writer
// follows it (refpipe.go), and both targets are measured by this one
// signal. A CommandRejected event (the subject's last token is the event
// type) makes its command visible and counts it as rejected.
//
// The tracker shares the process, and so the garbage collector, with
// agentbus: its index is keyed by the correlation id's 16 bytes, a map the
// collector need not scan.
type tracker struct {
	idx       map[uuid.UUID]int // correlation id -> command index; read-only
	visible   []atomic.Int64    // unix nanos, 0 = not yet
	left      atomic.Int64
	rejected  atomic.Int64
	allSeen   chan struct{}
	onVisible func(i int) // optional; called once per command, on the subscription goroutine
	stops     []func()
}

// visibleMode selects how the tracker observes the events: "core" (a
// plain core-NATS subscription: sees an event as it is published, which
// can be a moment before JetStream has stored it) or "watch" (an ordered
// JetStream consumer on the event stream: sees it once stored; costs the
// server a little more).
var visibleMode = "core"

// The tracker observes on a connection of its own, as an outside client
// would, not on the target's.
func newTracker(tg target, corrs []string, onVisible func(int)) (*tracker, error) {
	nc, err := tg.observer()
	if err != nil {
		return nil, err
	}
	t := &tracker{
		idx: make(map[uuid.UUID]int, len(corrs)), visible: make([]atomic.Int64, len(corrs)),
		allSeen: make(chan struct{}), onVisible: onVisible,
	}
	for i, c := range corrs {
		id, err := uuid.Parse(c)
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("tracker: correlation id %q: %w", c, err)
		}
		t.idx[id] = i
	}
	t.left.Store(int64(len(corrs)))
	t.stops = append(t.stops, nc.Close)
	onEvent := func(subject string, h nats.Header) {
		now := time.Now().UnixNano()
		i, ok := t.index(h.Get(bus.HeaderCorrelationID))
		if !ok || !t.visible[i].CompareAndSwap(0, now) {
			return
		}
		if rejectedEvent(subject) {
			t.rejected.Add(1)
		}
		if t.onVisible != nil {
			t.onVisible(i)
		}
		if t.left.Add(-1) == 0 {
			close(t.allSeen)
		}
	}
	if visibleMode == "watch" {
		js, err := jetstream.New(nc)
		if err != nil {
			t.close()
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := js.OrderedConsumer(ctx, natsjs.NamesFor("agentbus").Events, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{trackedEvents}, DeliverPolicy: jetstream.DeliverNewPolicy,
		})
		if err != nil {
			t.close()
			return nil, err
		}
		cc, err := c.Consume(func(m jetstream.Msg) { onEvent(m.Subject(), m.Headers()) })
		if err != nil {
			t.close()
			return nil, err
		}
		t.stops = append(t.stops, cc.Stop)
		return t, nil
	}
	s, err := nc.Subscribe(trackedEvents, func(m *nats.Msg) { onEvent(m.Subject, m.Header) })
	if err != nil {
		t.close()
		return nil, err
	}
	_ = s.SetPendingLimits(-1, -1)
	t.stops = append(t.stops, func() { _ = s.Unsubscribe() })
	return t, nc.Flush()
}

// trackedEvents are the subjects the tracker watches: every event of the
// event stream, on agentbus and on the bare pipeline alike.
const trackedEvents = "agentbus.evt.>"

// rejectedEvent says whether the event on subject is a CommandRejected.
func rejectedEvent(subject string) bool {
	return subject[strings.LastIndexByte(subject, '.')+1:] == decide.TypeCommandRejected
}

// index is the command index of correlation id c, if tracked.
func (t *tracker) index(c string) (int, bool) {
	id, err := uuid.Parse(c)
	if err != nil {
		return 0, false
	}
	i, ok := t.idx[id]
	return i, ok
}

// wait returns true when every command became visible before timeout.
func (t *tracker) wait(timeout time.Duration) bool {
	select {
	case <-t.allSeen:
		return true
	case <-time.After(timeout):
		return false
	}
}

func (t *tracker) close() {
	for i := len(t.stops) - 1; i >= 0; i-- {
		t.stops[i]()
	}
}
