package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// tracker watches, over core NATS, (a) the receipt KV updates of a known set
// of commands and, when observeStored is set, (b) the events published on
// agentbus.evt.>. A command is "visible" the moment its receipt update has
// status processed or rejected and lists at least one event sequence: that
// receipt is exactly what GET /events?correlationId= reads, so from then on
// the lookup returns the event. "Stored" is the moment the event message
// reached the server (observed by a core subscriber on the event subject).
//
// The tracker shares the process, and so the garbage collector, with
// agentbus: its index is keyed by the correlation id's 16 bytes, a map the
// collector need not scan.
type tracker struct {
	idx       map[uuid.UUID]int // correlation id -> command index; read-only
	visible   []atomic.Int64    // unix nanos, 0 = not yet
	stored    []atomic.Int64
	left      atomic.Int64
	rejected  atomic.Int64
	badJSON   atomic.Int64
	allSeen   chan struct{}
	onVisible func(i int) // optional; called once per command, on the subscription goroutine
	stops     []func()
}

// visibleMode selects how the tracker observes receipts and events:
// "core" (plain core-NATS subscriptions: sees a message as it is published,
// which can be a moment before JetStream has stored it) or "watch" (ordered
// JetStream consumers: sees it once stored, i.e. readable; costs the server
// a little more).
var visibleMode = "core"

// observeStored (-stored) also observes every event on agentbus.evt.>, for
// the latency stage's "event stored" row. It is off by default: the extra
// subscription is work for the server and this process that an outside
// observer would not put on agentbus's two cores.
var observeStored bool

// The tracker observes on a connection of its own, as an outside client
// would, not on the target's.
func newTracker(tg target, corrs []string, onVisible func(int)) (*tracker, error) {
	nc, err := tg.observer()
	if err != nil {
		return nil, err
	}
	t := &tracker{
		idx: make(map[uuid.UUID]int, len(corrs)), visible: make([]atomic.Int64, len(corrs)),
		stored: make([]atomic.Int64, len(corrs)), allSeen: make(chan struct{}), onVisible: onVisible,
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
	names := natsjs.NamesFor("agentbus")
	receiptPrefix := "$KV." + names.Receipts + ".default."
	onReceipt := func(subject string, data []byte) {
		now := time.Now().UnixNano()
		i, ok := t.index(strings.TrimPrefix(subject, receiptPrefix))
		if !ok || t.visible[i].Load() != 0 {
			return
		}
		status, hasEvents, ok := receiptOutcome(data)
		if !ok {
			t.badJSON.Add(1)
			return
		}
		if (status != projection.StatusProcessed && status != projection.StatusRejected) || !hasEvents {
			return
		}
		t.visible[i].Store(now)
		if status == projection.StatusRejected {
			t.rejected.Add(1)
		}
		if t.onVisible != nil {
			t.onVisible(i)
		}
		if t.left.Add(-1) == 0 {
			close(t.allSeen)
		}
	}
	onEvent := func(h nats.Header) {
		now := time.Now().UnixNano()
		if i, ok := t.index(h.Get(bus.HeaderCorrelationID)); ok {
			t.stored[i].CompareAndSwap(0, now)
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
		watch := func(stream, filter string, h func(jetstream.Msg)) error {
			c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverNewPolicy,
			})
			if err != nil {
				return err
			}
			cc, err := c.Consume(h)
			if err != nil {
				return err
			}
			t.stops = append(t.stops, cc.Stop)
			return nil
		}
		if err := watch("KV_"+names.Receipts, receiptPrefix+">", func(m jetstream.Msg) { onReceipt(m.Subject(), m.Data()) }); err != nil {
			t.close()
			return nil, err
		}
		if observeStored {
			if err := watch(names.Events, "agentbus.evt.>", func(m jetstream.Msg) { onEvent(m.Headers()) }); err != nil {
				t.close()
				return nil, err
			}
		}
		return t, nil
	}
	rs, err := nc.Subscribe(receiptPrefix+">", func(m *nats.Msg) { onReceipt(m.Subject, m.Data) })
	if err != nil {
		t.close()
		return nil, err
	}
	subs := []*nats.Subscription{rs}
	if observeStored {
		es, err := nc.Subscribe("agentbus.evt.>", func(m *nats.Msg) { onEvent(m.Header) })
		if err != nil {
			t.close()
			return nil, err
		}
		subs = append(subs, es)
	}
	for _, s := range subs {
		_ = s.SetPendingLimits(-1, -1)
		t.stops = append(t.stops, func() { _ = s.Unsubscribe() })
	}
	return t, nc.Flush()
}

// receiptOutcome reads a receipt's status and whether it lists an event,
// as json.Unmarshal into project.Receipt would (track_test.go holds it to
// that), at a fraction of the cost: the observer runs on the measured
// cores. A quote inside a JSON string is escaped, so the first "status":"
// and "events":[ in a valid receipt are its own top-level fields.
func receiptOutcome(data []byte) (status string, hasEvents, ok bool) {
	if !json.Valid(data) {
		return "", false, false
	}
	const statusKey, eventsKey = `"status":"`, `"events":[`
	i := bytes.Index(data, []byte(statusKey))
	if i < 0 {
		return "", false, false
	}
	rest := data[i+len(statusKey):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return "", false, false
	}
	status = string(rest[:end])
	if j := bytes.Index(data, []byte(eventsKey)); j >= 0 && j+len(eventsKey) < len(data) {
		c := data[j+len(eventsKey)]
		hasEvents = c >= '0' && c <= '9'
	}
	return status, hasEvents, true
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
