package query_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/localstore/localstoretest"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/query"
	"github.com/nats-io/nats.go/jetstream"
)

// eventLog returns an empty event log on a server of the test's own.
func eventLog(ctx context.Context, t *testing.T) bus.Log {
	t.Helper()
	conn := natsjstest.Conn(t)
	if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"agentbus.evt.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	log, err := conn.Log(ctx, "EV")
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// indexedEvent is one event TestIndexedPagesAreTheLogsOwn stores: its
// subject and whether a page serves it (a JSON object).
type indexedEvent struct {
	subject  string
	servable bool
}

// TestIndexedPagesAreTheLogsOwn walks a log whose first part the type
// index holds and whose rest it does not (its follower stopped), page by
// page, with and without the index, and checks that both serve exactly
// the log's events of the tenant and types asked for, in order: the
// index's events, then the log's after them, with nothing skipped or
// repeated where the two meet, other tenants' events and subjects no type
// filter matches left out as a filter leaves them.
func TestIndexedPagesAreTheLogsOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := eventLog(ctx, t)
	var stored []indexedEvent // by sequence - 1
	store := func(from, to int) {
		for i := from; i < to; i++ {
			tenant, typ := "default", "Dense"+strconv.Itoa(i%3)
			switch {
			case i%5 == 4:
				tenant = "other"
			case i%97 == 11:
				typ = "Rare"
			}
			subject := fmt.Sprintf("agentbus.evt.%s.Order.o-%d.%s", tenant, i, typ)
			data := fmt.Sprintf(`{"n":%d}`, i)
			switch i % 61 {
			case 7: // no type filter matches it; the tenant's does
				subject = "agentbus.evt.default.loose-" + strconv.Itoa(i)
			case 8: // not served
				data = "not json"
			}
			if _, err := log.Append(ctx, []*bus.Message{{Subject: subject, Data: []byte(data)}}, nil); err != nil {
				t.Fatal(err)
			}
			stored = append(stored, indexedEvent{subject, data[0] == '{'})
		}
	}
	store(0, 400)
	idx := projection.NewTypeIndex(localstoretest.Open(t, ""), bus.Subjects{Prefix: "agentbus"}, slog.New(slog.DiscardHandler))
	following, stop := context.WithCancel(ctx)
	if err := idx.Start(following, bus.LogTail(log, bus.Subjects{Prefix: "agentbus"})); err != nil {
		t.Fatal(err)
	}
	for idx.Through() < 400 {
		select {
		case <-ctx.Done():
			t.Fatalf("the index holds %d events of 400", idx.Through())
		case <-time.After(5 * time.Millisecond):
		}
	}
	stop()
	time.Sleep(50 * time.Millisecond) // the follower has stopped
	store(400, 700)
	if got := idx.Through(); got != 400 {
		t.Fatalf("the stopped index holds %d events; want 400", got)
	}

	quiet := slog.New(slog.DiscardHandler)
	readers := map[string]*query.Reader{
		"index":  query.New(query.Config{Prefix: "agentbus"}, query.Ports{Events: log, TypeIndex: idx}, quiet),
		"filter": query.New(query.Config{Prefix: "agentbus"}, query.Ports{Events: log}, quiet),
		// An index that holds nothing yet: every page is the log's.
		"unstarted": query.New(query.Config{Prefix: "agentbus"},
			query.Ports{Events: log, TypeIndex: projection.NewTypeIndex(localstoretest.Open(t, ""), bus.Subjects{Prefix: "agentbus"}, quiet)}, quiet),
	}
	subj := bus.Subjects{Prefix: "agentbus"}
	want := func(types []string) []int {
		var out []int
		for i, e := range stored {
			if !e.servable {
				continue
			}
			tenant, typ, typed := subj.TypedEvent(bus.RootEvents, e.subject)
			switch {
			case len(types) == 0 && strings.HasPrefix(e.subject, "agentbus.evt.default."):
				out = append(out, i)
			case len(types) > 0 && typed && tenant == "default" && slices.Contains(types, typ):
				out = append(out, i)
			}
		}
		return out
	}
	for name, rd := range readers {
		for _, types := range [][]string{nil, {"Rare"}, {"Dense1"}, {"Dense0", "Rare"}, {"Dense0", "Dense1", "Dense2", "Rare", "Never"}} {
			for _, limit := range []int{1, 7, 100} {
				t.Run(fmt.Sprintf("%s/%v/%d", name, types, limit), func(t *testing.T) {
					var got []int
					cursor := ""
					for pages := 0; ; pages++ {
						if pages > len(stored)+1 {
							t.Fatal("the walk does not end")
						}
						p, err := rd.ListEvents(ctx, "default", query.EventQuery{Types: types, After: cursor, Limit: limit})
						if err != nil {
							t.Fatal(err)
						}
						for i, raw := range p.Events {
							var e struct{ N int }
							if err := json.Unmarshal(raw, &e); err != nil {
								t.Fatal(err)
							}
							if p.Messages[i].Seq != uint64(e.N)+1 {
								t.Fatalf("event %d served at sequence %d", e.N, p.Messages[i].Seq)
							}
							got = append(got, e.N)
						}
						if len(p.Events) == 0 {
							break
						}
						cursor = p.Next
					}
					if w := want(types); !slices.Equal(got, w) {
						t.Fatalf("walked %v\nwant   %v", got, w)
					}
				})
			}
		}
	}
}

// TestIndexedPagesServeOnlyTheTenantsTypes: an index that points at an
// event of another tenant, or of another type (a replica's index kept
// across a change of the log under it), does not make a page serve it.
func TestIndexedPagesServeOnlyTheTenantsTypes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := eventLog(ctx, t)
	for _, subject := range []string{"agentbus.evt.a.Order.o1.Placed", "agentbus.evt.b.Order.o2.Placed", "agentbus.evt.a.Order.o3.Shipped"} {
		if _, err := log.Append(ctx, []*bus.Message{{Subject: subject, Data: []byte(`{"n":1}`)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	subj := bus.Subjects{Prefix: "agentbus"}
	disk := localstoretest.Open(t, "")
	idx := projection.NewTypeIndex(disk, subj, slog.New(slog.DiscardHandler))
	if err := idx.Start(ctx, bus.LogTail(log, subj)); err != nil {
		t.Fatal(err)
	}
	if err := idx.WaitThrough(ctx, 3); err != nil {
		t.Fatal(err)
	}
	// Tenant a's Placed, as the index's keys are laid out (projection's
	// ondisk.go): at 2 (tenant b's) and at 3 (a's Shipped) too.
	for _, seq := range []uint64{2, 3} {
		key := binary.BigEndian.AppendUint64([]byte("t\x00a\x00Placed\x00"), seq)
		if err := disk.Write([]bus.DiskWrite{{Key: key}}); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := idx.Find("a", []string{"Placed"}, 0, 10); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("the index finds %v; the test wants it to point at 1, 2 and 3", got)
	}
	rd := query.New(query.Config{Prefix: "agentbus"}, query.Ports{Events: log, TypeIndex: idx}, slog.New(slog.DiscardHandler))
	p, err := rd.ListEvents(ctx, "a", query.EventQuery{Types: []string{"Placed"}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, m := range p.Messages {
		seqs = append(seqs, m.Seq)
	}
	if !slices.Equal(seqs, []uint64{1}) {
		t.Fatalf("page of a's Placed: %v; want [1]", seqs)
	}
}
