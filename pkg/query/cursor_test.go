package query_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/query"
)

// racyLog answers as a stream of 40 events of other types (N) in which,
// while GET /events reads its type filters one after the other, a B at
// seq 43 lands after the A read (which saw A@41 only) although an A at
// seq 42 is written before it. The 40 others make the page read A and B
// on their own rather than from all the tenant's events.
type racyLog struct {
	bus.Log
	last uint64
}

func (l *racyLog) LastSeq(context.Context) (uint64, error) { return l.last, nil }

func (l *racyLog) Range(_ context.Context, filter string, from uint64, max int) ([]*bus.Message, error) {
	ev := func(typ string, seq uint64) *bus.Message {
		return &bus.Message{Subject: "agentbus.evt.default._._." + typ, Seq: seq, Data: []byte(fmt.Sprintf(`{"n":%d}`, seq))}
	}
	all := map[string][]*bus.Message{"A": {ev("A", 41)}, "B": {ev("B", 43)}}
	for seq := uint64(1); seq <= 40; seq++ {
		all[">"] = append(all[">"], ev("N", seq))
	}
	all[">"] = append(all[">"], ev("A", 41))
	if l.last >= 43 { // the second page: A@42 is visible now, and B@43 to a read of everything
		all["A"] = append(all["A"], ev("A", 42))
		all[">"] = append(all[">"], ev("A", 42), ev("B", 43))
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
	log := &racyLog{last: 41} // A@41 was the last stored when the page began
	a := query.New(query.Config{}, query.Ports{Events: log}, slog.New(slog.DiscardHandler))
	page, err := a.ListEvents(context.Background(), "default", query.EventQuery{Types: []string{"A", "B"}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 || string(page.Events[0]) != `{"n":41}` || page.NextSeq != 41 {
		t.Fatalf("page 1 = %s next %d; want only A@41 and next 41 (B@43 lies past what every read covered)", page.Events, page.NextSeq)
	}
	log.last = 43
	page, err = a.ListEvents(context.Background(), "default", query.EventQuery{Types: []string{"A", "B"}, Limit: 10, After: page.Next})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page.Events {
		got = append(got, string(e))
	}
	if strings.Join(got, ",") != `{"n":42},{"n":43}` || page.NextSeq != 43 || page.Next != a.Cursor("default", false, 43) {
		t.Fatalf("page 2 = %v next %d; want A@42, B@43 and next 43", got, page.NextSeq)
	}
}
