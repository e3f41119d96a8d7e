package projection

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/localstore"
)

// BenchmarkHistoryPerCommand is what the history on disk costs a command
// processed here: POST /commands' lookup (absent), the command part from
// the command log, the events part and the type index from its event.
func BenchmarkHistoryPerCommand(b *testing.B) {
	log := slog.New(slog.DiscardHandler)
	disk, _, err := localstore.Open(b.TempDir(), 48<<20, log)
	if err != nil {
		b.Fatal(err)
	}
	defer disk.Close()
	subj := bus.Subjects{Prefix: "agentbus"}
	h := NewHistory(disk, nil, subj, log)
	types := NewTypeIndex(disk, subj, log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.cmds.run(ctx)
	go h.evts.run(ctx)
	go types.model.run(ctx)
	h.ready.Store(true)
	b.ReportAllocs()
	for i := range b.N {
		id := "cmd-" + strconv.Itoa(i)
		corr := envelope.CorrelationID("default", "bench", id)
		if old, err := (&Receipts{history: h}).InHistory("default", corr); err != nil || old {
			b.Fatal(old, err)
		}
		seq := uint64(i + 1)
		h.addCommand(ctx, &bus.Message{Subject: "agentbus.cmd.default.PlaceOrder", Seq: seq,
			Data: []byte(`{"specversion":"1.0","id":"` + id + `","source":"bench","type":"PlaceOrder","time":"2026-11-29T08:00:00Z","data":{}}`)})
		ev := &bus.Message{Subject: fmt.Sprintf("agentbus.evt.default.order.o-%d.OrderPlaced", i), Seq: seq, Data: []byte(`{"data":{}}`),
			Header: bus.Header{bus.HeaderCorrelationID: {corr}, bus.HeaderCommandSeq: {strconv.Itoa(i + 1)}, bus.HeaderCommandType: {"PlaceOrder"}}}
		h.addEvent(ctx, ev)
		types.add(ctx, bus.NewEvent(subj, ev))
	}
}
