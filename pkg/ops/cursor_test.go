package ops_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/ops"
)

// racyLog answers as a stream in which, while GET /events reads its type
// filters one after the other, a B at seq 3 lands after the A read
// (which saw A@1 only) although an A at seq 2 is written before it.
type racyLog struct {
	bus.Log
	last uint64
}

func (l *racyLog) LastSeq(context.Context) (uint64, error) { return l.last, nil }

func (l *racyLog) Range(_ context.Context, filter string, from uint64, max int) ([]*bus.Message, error) {
	all := map[string][]*bus.Message{
		"A": {{Subject: "agentbus.evt.default._._.A", Seq: 1, Data: []byte(`{"n":1}`)}},
		"B": {{Subject: "agentbus.evt.default._._.B", Seq: 3, Data: []byte(`{"n":3}`)}},
	}
	if l.last >= 3 { // the second page: A@2 is visible now
		all["A"] = append(all["A"], &bus.Message{Subject: "agentbus.evt.default._._.A", Seq: 2, Data: []byte(`{"n":2}`)})
	}
	var out []*bus.Message
	for _, m := range all[filter[strings.LastIndexByte(filter, '.')+1:]] {
		if m.Seq >= from && len(out) < max {
			out = append(out, m)
		}
	}
	return out, nil
}

func TestMultiTypeCursorSkipsNothing(t *testing.T) {
	cat, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	log := &racyLog{last: 1} // only A@1 was stored when the page began
	a := ops.New(ops.Config{}, cat, ops.Ports{Events: log}, slog.New(slog.DiscardHandler))
	page, err := a.ListEvents(context.Background(), "default", ops.EventQuery{Types: []string{"A", "B"}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 || string(page.Events[0]) != `{"n":1}` || page.Next != "1" {
		t.Fatalf("page 1 = %s next %s; want only A@1 and next 1 (B@3 lies past what every read covered)", page.Events, page.Next)
	}
	log.last = 3
	page, err = a.ListEvents(context.Background(), "default", ops.EventQuery{Types: []string{"A", "B"}, Limit: 10, After: page.Next})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page.Events {
		got = append(got, string(e))
	}
	if strings.Join(got, ",") != `{"n":2},{"n":3}` || page.Next != "3" {
		t.Fatalf("page 2 = %v next %s; want A@2, B@3 and next 3", got, page.Next)
	}
}
