package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/localstore/localstoretest"
	"github.com/agentbus/agentbus/pkg/projection"
)

// agentLog is an event log in memory of one agent's registration, at
// its last sequence.
type agentLog struct {
	bus.Log
	msgs []*bus.Message
}

func (l *agentLog) Range(_ context.Context, filter string, from uint64, max int) ([]*bus.Message, error) {
	var out []*bus.Message
	for _, m := range l.msgs {
		if m.Seq >= from && bus.SubjectMatches(m.Subject, filter) && len(out) < max {
			out = append(out, m)
		}
	}
	return out, nil
}

func (l *agentLog) Follow(context.Context, string, uint64, func(*bus.Message)) {}

// TestForgetOtherLogsCountsTheRegistries: a disk whose registries hold
// more of the event log than it has is emptied; one that holds no more is
// kept.
func TestForgetOtherLogsCountsTheRegistries(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	subj := bus.Subjects{Prefix: "agentbus"}
	disk := localstoretest.Open(t, "")
	if err := projection.MarkDiskFormat(disk); err != nil { // as openDisks finds an empty store
		t.Fatal(err)
	}
	events := &agentLog{msgs: []*bus.Message{
		{Subject: "agentbus.evt.a.Order.o1.OrderPlaced", Seq: 1},
		{Subject: "agentbus.evt.a.Order.o1.OrderShipped", Seq: 2},
		{Subject: subj.Event(bus.RootEvents, "a", decide.AggAgent, "ag1", decide.TypeAgentRegistered), Seq: 3,
			Data: []byte(`{"data":{"id":"ag1","name":"n","accepts":[],"produces":[]}}`)},
	}}
	regs := projection.NewRegistries(events, disk, subj, log)
	ctx, cancel := context.WithCancel(context.Background())
	if err := regs.StartOn(ctx, bus.LogTail(events, subj)); err != nil {
		t.Fatal(err)
	}
	held := func() uint64 {
		t.Helper()
		seq, err := projection.NewRegistries(nil, disk, subj, log).Progress()
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	for deadline := time.Now().Add(10 * time.Second); held() != 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the registries on disk hold the log up to %d; want 3", held())
		}
	}
	cancel()
	if err := projection.ForgetOtherLogs(disk, subj, 0, 3, log); err != nil {
		t.Fatal(err)
	}
	if got := held(); got != 3 {
		t.Fatalf("with an event log of 3 events, the registries on disk hold it up to %d; want 3, kept", got)
	}
	if err := projection.ForgetOtherLogs(disk, subj, 0, 2, log); err != nil {
		t.Fatal(err)
	}
	if got := held(); got != 0 {
		t.Fatalf("with an event log of 2 events, the registries on disk hold it up to %d; want the disk emptied", got)
	}
}

// TestForgetOtherLogsOfAnotherFormat: a disk written in another format
// (or before formats were recorded) is emptied and marked with this one;
// an empty disk, and one of this format, are kept.
func TestForgetOtherLogsOfAnotherFormat(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	subj := bus.Subjects{Prefix: "agentbus"}
	disk := localstoretest.Open(t, "")
	has := func(key string) bool {
		t.Helper()
		_, ok, err := disk.Get([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if err := projection.ForgetOtherLogs(disk, subj, 0, 0, log); err != nil { // empty: kept, marked
		t.Fatal(err)
	}
	if err := disk.Write([]bus.DiskWrite{{Key: []byte("x"), Val: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	if err := projection.ForgetOtherLogs(disk, subj, 0, 0, log); err != nil {
		t.Fatal(err)
	}
	if !has("x") {
		t.Fatal("a disk of this format was emptied")
	}
	if err := disk.Write([]bus.DiskWrite{{Key: []byte("f"), Val: []byte("agentbus-disk-0")}}); err != nil {
		t.Fatal(err)
	}
	if err := projection.ForgetOtherLogs(disk, subj, 0, 0, log); err != nil {
		t.Fatal(err)
	}
	if has("x") {
		t.Fatal("a disk of another format was kept")
	}
	if same, err := projection.SameDiskFormat(disk); !same || err != nil {
		t.Fatalf("after the rebuild the disk is not marked with this format: %v %v", same, err)
	}
}
