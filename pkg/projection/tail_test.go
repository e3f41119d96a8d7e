package projection_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/localstore/localstoretest"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// handTail is a bus.Tail the test hands events through by hand.
type handTail struct {
	mu      sync.Mutex
	follows []handFollow
}

type handFollow struct {
	filter string
	from   uint64
	fn     func(*bus.Event)
}

func (t *handTail) Follow(_ context.Context, filter string, from uint64, fn func(*bus.Event)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.follows = append(t.follows, handFollow{filter, from, fn})
}

// hand gives m to every Follow whose filter takes it, from its position.
func (t *handTail) hand(m *bus.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.follows {
		if m.Seq >= f.from && bus.SubjectMatches(m.Subject, f.filter) {
			f.fn(bus.NewEvent(bus.Subjects{Prefix: "agentbus"}, m))
		}
	}
}

// noFollowLog is a log whose own Follow must not be used.
type noFollowLog struct {
	bus.Log
	followed atomic.Int64
}

func (l *noFollowLog) Follow(ctx context.Context, filter string, from uint64, fn func(*bus.Message)) {
	l.followed.Add(1)
	l.Log.Follow(ctx, filter, from, fn)
}

// freshEvents returns a server with an empty event stream, EV, and the
// stream as a log.
func freshEvents(t *testing.T) (*natsjs.Conn, bus.Log) {
	t.Helper()
	conn := natsjstest.Conn(t)
	if _, err := conn.JS.CreateStream(t.Context(), jetstream.StreamConfig{Name: "EV", Subjects: []string{"agentbus.evt.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	log, err := conn.Log(t.Context(), "EV")
	if err != nil {
		t.Fatal(err)
	}
	return conn, log
}

// serviceLog returns a fresh event stream and a function storing the
// registration of service id, returning the stored message.
func serviceLog(t *testing.T) (*noFollowLog, func(id string) *bus.Message) {
	t.Helper()
	conn, log := freshEvents(t)
	ctx := t.Context()
	l := &noFollowLog{Log: log}
	return l, func(id string) *bus.Message {
		t.Helper()
		m := nats.NewMsg(fmt.Sprintf("agentbus.evt.a.%s.%s.%s", decide.AggService, id, decide.TypeServiceRegistered))
		m.Data = fmt.Appendf(nil, `{"id":"e-%s","type":%q,"data":{"id":%q,"name":"S"}}`, id, decide.TypeServiceRegistered, id)
		ack, err := conn.JS.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Get(ctx, ack.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
}

// TestRegistriesOnATail: started on a tail, the registries replay what is
// stored from the log, then take what comes from the tail, each from the
// event after its replay, and never follow the log themselves. Current
// still reads the log for what the tail has not handed yet.
func TestRegistriesOnATail(t *testing.T) {
	log, store := serviceLog(t)
	ctx := t.Context()
	first := store("s1")
	regs := projection.NewRegistries(log, localstoretest.Open(t, ""), bus.Subjects{Prefix: "agentbus"}, slog.New(slog.DiscardHandler))
	tail := &handTail{}
	if err := regs.StartOn(ctx, tail); err != nil {
		t.Fatal(err)
	}
	if _, ok := regs.Services.Get("a", "s1"); !ok {
		t.Fatal("s1, stored before the start, is not in the registry")
	}
	if len(tail.follows) != 3 {
		t.Fatalf("the registries follow the tail %d times, want 3", len(tail.follows))
	}
	for _, f := range tail.follows {
		// Each from the event after the last of its own it replayed.
		want := uint64(1)
		if f.filter == "agentbus.evt.*.service.*.*" {
			want = first.Seq + 1
		}
		if f.from != want {
			t.Errorf("%s followed from %d, want %d (after the replay)", f.filter, f.from, want)
		}
	}
	handed := store("s2")
	tail.hand(handed)
	if _, ok := regs.Services.Get("a", "s2"); !ok {
		t.Fatal("s2, handed by the tail, is not in the registry")
	}
	// Stored, not handed by the tail yet: Current reads it from the log.
	late := store("s3")
	if _, ok := regs.Services.Get("a", "s3"); ok {
		t.Fatal("s3 is in the registry before it was handed or read")
	}
	if err := regs.Services.Current(ctx, late.Seq); err != nil {
		t.Fatal(err)
	}
	if _, ok := regs.Services.Get("a", "s3"); !ok {
		t.Fatal("Current returned without s3")
	}
	tail.hand(late) // handed afterwards: applied once
	if got := regs.Services.Count("a"); got != 3 {
		t.Errorf("%d services, want 3", got)
	}
	if n := log.followed.Load(); n != 0 {
		t.Errorf("the registries followed the log %d times themselves", n)
	}
}

// TestTypeIndexOnATail: started on a tail, the index asks it for every
// event from the log's first, and indexes what it hands.
func TestTypeIndexOnATail(t *testing.T) {
	idx := projection.NewTypeIndex(localstoretest.Open(t, ""), bus.Subjects{Prefix: "agentbus"}, slog.New(slog.DiscardHandler))
	tail := &handTail{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := idx.Start(ctx, tail); err != nil {
		t.Fatal(err)
	}
	if len(tail.follows) != 1 || tail.follows[0].filter != ">" || tail.follows[0].from != 1 {
		t.Fatalf("the index follows %+v, want > from 1", tail.follows)
	}
	tail.hand(&bus.Message{Subject: "agentbus.evt.a.Order.o1.Placed", Seq: 1})
	tail.hand(&bus.Message{Subject: "agentbus.evt.a.Order.o1.Shipped", Seq: 2})
	tail.hand(&bus.Message{Subject: "agentbus.evt.a.Order.o2.Placed", Seq: 3})
	if err := idx.WaitThrough(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if got, through := idx.Find("a", []string{"Placed"}, 0, 10); !slices.Equal(got, []uint64{1, 3}) || through != 3 {
		t.Errorf("Find = %v through %d, want [1 3] through 3", got, through)
	}
}
