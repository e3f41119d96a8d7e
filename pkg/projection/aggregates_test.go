package projection_test

import (
	"log/slog"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/localstore/localstoretest"
	"github.com/agentbus/agentbus/pkg/projection"
)

// startAggregates starts an aggregate index of log on disk and waits
// until it holds the log up to through.
func startAggregates(t *testing.T, disk bus.Disk, log bus.Log, through uint64) *projection.Aggregates {
	t.Helper()
	idx := projection.NewAggregates(disk, bus.Subjects{Prefix: "agentbus"}, slog.New(slog.DiscardHandler))
	startOnLog(t, log, through, idx.Start, idx.WaitThrough)
	return idx
}

func TestAggregatesHoldEachAggregatesLastEvent(t *testing.T) {
	subj := bus.Subjects{Prefix: "agentbus"}
	ev := func(tenant, aggType, id, typ string) *bus.Message {
		m := &bus.Message{Subject: subj.Event(bus.RootEvents, tenant, aggType, id, typ), Header: bus.Header{}}
		if aggType != "" {
			m.Header.Set(bus.HeaderAggregateID, id)
		}
		return m
	}
	forged := ev("a", "order", "o1", "OrderShipped")
	forged.Subject = subj.Event(bus.RootEvents, "a", "order", "o-other-shard", "OrderShipped")
	if bus.ShardOf("o-other-shard") == bus.ShardOf("o1") {
		t.Fatal("the test's ids share a shard")
	}
	msgs := []*bus.Message{
		ev("a", "order", "o1", "OrderPlaced"),             // 1
		ev("a", "order", "o2", "OrderPlaced"),             // 2
		ev("b", "order", "o1", "OrderPlaced"),             // 3: another tenant
		ev("a", "order", "o1", "OrderShipped"),            // 4
		ev("a", "agent", "o1", "AgentRegistered"),         // 5: a registration: read by its subject
		ev("a", "", "", "NoteAdded"),                      // 6: no aggregate
		forged,                                            // 7: its header names an aggregate of another shard
		{Subject: "agentbus.evt.a.order.o3.OrderPlaced"},  // 8: the id in the subject, as before shards
		{Subject: "agentbus.syn.a.order.~08.OrderPlaced"}, // 9: injected
		{Subject: subj.Event(bus.RootEvents, "a", "invoice", "o1", "Billed"), Header: bus.Header{}}, // 10: no header
	}
	log := &storedLog{}
	for i, m := range msgs {
		m.Seq = uint64(i + 1)
		log.msgs = append(log.msgs, m)
	}
	disk := localstoretest.Open(t, "")
	idx := startAggregates(t, disk, log, 10)
	for _, tc := range []struct {
		tenant, aggType, id string
		want                uint64
	}{
		{"a", "order", "o1", 4},
		{"a", "order", "o2", 2},
		{"b", "order", "o1", 3},
		{"b", "order", "o2", 0},
		{"a", "agent", "o1", 0},
		{"a", "order", "o-other-shard", 0},
		{"a", "order", "o3", 8},
		{"a", "invoice", "o1", 0},
	} {
		got, err := idx.Last(tc.tenant, tc.aggType, tc.id)
		if err != nil || got != tc.want {
			t.Errorf("Last(%s, %s, %s) = %d, %v; want %d", tc.tenant, tc.aggType, tc.id, got, err, tc.want)
		}
	}
	if idx.Applied() != 10 {
		t.Errorf("Applied = %d, want 10", idx.Applied())
	}
	// Each shard's last event indexed: those of o1 and o2 of tenant a (o2
	// may share o1's shard), o1 of tenant b; none of o-other-shard's (its
	// only event names another shard) unless o2 is on it.
	type event struct {
		seq        uint64
		tenant, id string
	}
	indexed := []event{{1, "a", "o1"}, {2, "a", "o2"}, {3, "b", "o1"}, {4, "a", "o1"}}
	shardLast := func(tenant, id string) uint64 {
		var last uint64
		for _, x := range indexed {
			if x.tenant == tenant && bus.ShardOf(x.id) == bus.ShardOf(id) {
				last = max(last, x.seq)
			}
		}
		return last
	}
	for _, c := range []struct{ tenant, id string }{{"a", "o1"}, {"a", "o2"}, {"b", "o1"}, {"a", "o-other-shard"}} {
		if got, want := idx.ShardLast(subj.Aggregate(c.tenant, "order", c.id)), shardLast(c.tenant, c.id); got != want {
			t.Errorf("ShardLast of %s %s's shard = %d; want %d", c.tenant, c.id, got, want)
		}
	}
	if got := idx.ShardLast(subj.Aggregate("a", "agent", "o1")); got != 0 {
		t.Errorf("ShardLast of a registration's subjects = %d; want 0", got)
	}

	// A second index on the same disk goes on from what the first wrote.
	log.msgs = append(log.msgs, ev("a", "order", "o2", "OrderCancelled"))
	log.msgs[10].Seq = 11
	again := startAggregates(t, disk, log, 11)
	if got, _ := again.Last("a", "order", "o2"); got != 11 {
		t.Errorf("after a restart, Last(o2) = %d; want 11", got)
	}
	if got, _ := again.Last("a", "order", "o1"); got != 4 {
		t.Errorf("after a restart, Last(o1) = %d; want 4", got)
	}
	// ShardLast knows the shards of the events it applied since its start.
	if got := again.ShardLast(subj.Aggregate("a", "order", "o2")); got != 11 {
		t.Errorf("after a restart, ShardLast of o2's shard = %d; want 11", got)
	}
	if got := again.ShardLast(subj.Aggregate("b", "order", "o1")); got != 0 {
		t.Errorf("after a restart, ShardLast of tenant b's shard = %d; want 0 (none applied since)", got)
	}
}
