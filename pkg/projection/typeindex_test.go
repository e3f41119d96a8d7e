package projection_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/localstore/localstoretest"
	"github.com/agentbus/agentbus/pkg/projection"
)

// startTypeIndex starts a type index of log on disk and waits until it
// holds the log up to through.
func startTypeIndex(t *testing.T, disk bus.Disk, log bus.Log, through uint64) *projection.TypeIndex {
	t.Helper()
	idx := projection.NewTypeIndex(disk, bus.Subjects{Prefix: "agentbus"}, slog.New(slog.DiscardHandler))
	startOnLog(t, log, through, idx.Start, idx.WaitThrough)
	return idx
}

// startOnLog starts a read model on disk following log, and waits until
// it holds the log up to through; it stops when t ends.
func startOnLog(t *testing.T, log bus.Log, through uint64,
	start func(context.Context, bus.Tail) error, waitThrough func(context.Context, uint64) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := start(ctx, bus.LogTail(log, bus.Subjects{Prefix: "agentbus"})); err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := waitThrough(wait, through); err != nil {
		t.Fatal(err)
	}
}

// storedLog hands its messages to Follow at once, in order.
type storedLog struct {
	bus.Log
	msgs []*bus.Message
}

func (l *storedLog) Follow(_ context.Context, _ string, from uint64, fn func(*bus.Message)) {
	for _, m := range l.msgs {
		if m.Seq >= from {
			fn(m)
		}
	}
}

func TestTypeIndexFindsATenantsEventsInOrder(t *testing.T) {
	subjects := []string{
		"agentbus.evt.a.Order.o1.Placed",    // 1
		"agentbus.evt.b.Order.o2.Placed",    // 2: another tenant
		"agentbus.evt.a.Order.o1.Shipped",   // 3
		"agentbus.evt.a._._.Placed",         // 4
		"agentbus.evt.a.loose",              // 5: no type filter matches it
		"agentbus.cmd.a.Placed",             // 6: not an event
		"agentbus.evt.a.Order.o3.Cancelled", // 7
		"agentbus.evt.a.Order.o1.Placed",    // 8
	}
	log := &storedLog{}
	for i, s := range subjects {
		log.msgs = append(log.msgs, &bus.Message{Subject: s, Seq: uint64(i + 1)})
	}
	idx := startTypeIndex(t, localstoretest.Open(t, ""), log, 8)
	if got := idx.Through(); got != 8 {
		t.Fatalf("Through = %d; want 8", got)
	}
	for _, tc := range []struct {
		types []string
		after uint64
		limit int
		want  []uint64
	}{
		{types: []string{"Placed"}, limit: 10, want: []uint64{1, 4, 8}},
		{types: []string{"Placed", "Shipped", "Placed"}, limit: 10, want: []uint64{1, 3, 4, 8}},
		{types: []string{"Placed", "Cancelled"}, after: 1, limit: 2, want: []uint64{4, 7}},
		{types: []string{"Never"}, limit: 10, want: nil},
		{types: nil, limit: 10, want: []uint64{1, 3, 4, 5, 7, 8}},
		{types: nil, after: 4, limit: 1, want: []uint64{5}},
		{types: []string{"Placed"}, after: 8, limit: 10, want: nil},
	} {
		got, through := idx.Find("a", tc.types, tc.after, tc.limit)
		if !slices.Equal(got, tc.want) || through != 8 {
			t.Errorf("Find(a, %v, after %d, limit %d) = %v, through %d; want %v, through 8", tc.types, tc.after, tc.limit, got, through, tc.want)
		}
	}
	if got, _ := idx.Find("b", []string{"Placed"}, 0, 10); !slices.Equal(got, []uint64{2}) {
		t.Errorf("tenant b's Placed = %v; want [2]", got)
	}
}

func TestTypeIndexFindsNothingPastWhatItHolds(t *testing.T) {
	log := &storedLog{msgs: []*bus.Message{
		{Subject: "agentbus.evt.a._._.Placed", Seq: 1},
		{Subject: "agentbus.evt.a._._.Placed", Seq: 2},
	}}
	idx := startTypeIndex(t, localstoretest.Open(t, ""), log, 2)
	if got, through := idx.Find("a", []string{"Placed"}, 5, 10); len(got) != 0 || through != 2 {
		t.Fatalf("Find after 5 = %v, through %d; want none, through 2", got, through)
	}
}

// TestTypeIndexGoesOnFromTheDisk: an index started again on the same disk
// asks the log only for what follows what it holds, and still finds what
// it indexed before.
func TestTypeIndexGoesOnFromTheDisk(t *testing.T) {
	dir := t.TempDir()
	log := &storedLog{msgs: []*bus.Message{
		{Subject: "agentbus.evt.a._._.Placed", Seq: 1},
		{Subject: "agentbus.evt.a._._.Shipped", Seq: 2},
	}}
	disk := localstoretest.Open(t, dir)
	startTypeIndex(t, disk, log, 2)
	time.Sleep(3 * 10 * time.Millisecond) // nothing more to write
	disk.Close()

	log.msgs = append(log.msgs, &bus.Message{Subject: "agentbus.evt.a._._.Placed", Seq: 3})
	tail := &handTail{}
	idx := projection.NewTypeIndex(localstoretest.Open(t, dir), bus.Subjects{Prefix: "agentbus"}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := idx.Start(ctx, tail); err != nil {
		t.Fatal(err)
	}
	if len(tail.follows) != 1 || tail.follows[0].from != 3 {
		t.Fatalf("the index follows %+v, want from 3", tail.follows)
	}
	tail.hand(log.msgs[2])
	if err := idx.WaitThrough(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if got, _ := idx.Find("a", nil, 0, 10); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("Find(a) = %v, want [1 2 3]", got)
	}
	if got, _ := idx.Find("a", []string{"Placed"}, 0, 10); !slices.Equal(got, []uint64{1, 3}) {
		t.Errorf("Find(a, Placed) = %v, want [1 3]", got)
	}
}
