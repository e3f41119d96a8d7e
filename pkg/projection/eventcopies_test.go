package projection_test

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/localstore/localstoretest"
	"github.com/agentbus/agentbus/pkg/projection"
)

// countingLog counts the reads by sequence and range that reach the log.
type countingLog struct {
	bus.Log
	gets, ranges atomic.Int64
}

func (l *countingLog) Get(ctx context.Context, seq uint64) (*bus.Message, error) {
	l.gets.Add(1)
	return l.Log.Get(ctx, seq)
}

func (l *countingLog) Range(ctx context.Context, filter string, from uint64, max int) ([]*bus.Message, error) {
	l.ranges.Add(1)
	return l.Log.Range(ctx, filter, from, max)
}

// storedEvents returns a fresh event stream holding n events, some with
// headers, one deleted (its sequence a gap).
func storedEvents(t *testing.T, n int, deleted uint64) *countingLog {
	t.Helper()
	conn, log := freshEvents(t)
	ctx := t.Context()
	for i := range n {
		m := &bus.Message{Subject: fmt.Sprintf("agentbus.evt.a.Order.s%d.Placed", i%3),
			Data: fmt.Appendf(nil, `{"id":"e%d","type":"Placed"}`, i)}
		if i%2 == 0 {
			m.Header = bus.Header{bus.HeaderCorrelationID: {fmt.Sprint("c", i)}, "Multi": {"x", "", "y"}}
		}
		if _, err := log.Append(ctx, []*bus.Message{m}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if deleted > 0 {
		s, err := conn.JS.Stream(ctx, "EV")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteMsg(ctx, deleted); err != nil {
			t.Fatal(err)
		}
	}
	return &countingLog{Log: log}
}

// sameMessages fails unless got and want hold the same messages: subject,
// headers (but those a read adds), payload, sequence and time.
func sameMessages(t *testing.T, what string, got, want []*bus.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages; want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := *got[i], *want[i]
		g.Header, w.Header = storedHeaders(g.Header), storedHeaders(w.Header)
		if g.Subject != w.Subject || g.Seq != w.Seq || string(g.Data) != string(w.Data) || !g.Time.Equal(w.Time) || !reflect.DeepEqual(g.Header, w.Header) {
			t.Fatalf("%s: message %d is %+v; want %+v", what, i, g, w)
		}
	}
}

// storedHeaders returns h without the headers a read adds, nil when none
// is left.
func storedHeaders(h bus.Header) bus.Header {
	var out bus.Header
	for k, v := range h {
		if !projection.ReadHeader(k) {
			if out == nil {
				out = bus.Header{}
			}
			out[k] = v
		}
	}
	return out
}

func TestEventCopiesAnswerAsTheLogDoesWithoutAskingIt(t *testing.T) {
	log := storedEvents(t, 40, 17)
	copies := projection.NewEventCopies(localstoretest.Open(t, ""), slog.New(slog.DiscardHandler))
	startOnLog(t, log, 40, copies.Start, copies.WaitThrough)
	copied := copies.Log(log)
	ctx := t.Context()
	log.gets.Store(0)
	for seq := uint64(1); seq <= 40; seq++ {
		if seq == 17 {
			continue
		}
		got, err := copied.Get(ctx, seq)
		if err != nil {
			t.Fatalf("Get(%d): %v", seq, err)
		}
		want, err := log.Log.Get(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		sameMessages(t, fmt.Sprint("Get ", seq), []*bus.Message{got}, []*bus.Message{want})
	}
	if n := log.gets.Load(); n != 0 {
		t.Fatalf("%d reads by sequence went to the log; want none", n)
	}
	for _, r := range []struct {
		from uint64
		max  int
	}{{1, 10}, {15, 5}, {16, 3}, {35, 10}, {40, 1}, {41, 5}} {
		log.ranges.Store(0)
		got, err := copied.Range(ctx, ">", r.from, r.max)
		if err != nil {
			t.Fatal(err)
		}
		want, err := log.Log.Range(ctx, ">", r.from, r.max)
		if err != nil {
			t.Fatal(err)
		}
		sameMessages(t, fmt.Sprintf("Range(%d, %d)", r.from, r.max), got, want)
		// Past the gap a range of the copies goes on (as the log's does),
		// and only a range reaching past what they hold asks the log.
		if asked := log.ranges.Load(); (asked > 0) != (r.from+uint64(r.max)-1 > 40) {
			t.Fatalf("Range(%d, %d) asked the log %d times", r.from, r.max, asked)
		}
	}
}

func TestEventCopiesLeaveWhatTheyDoNotHoldToTheLog(t *testing.T) {
	log := storedEvents(t, 15, 0)
	disk := localstoretest.Open(t, "")
	copies := projection.NewEventCopies(disk, slog.New(slog.DiscardHandler))
	ctx := t.Context()
	// The copies are handed the first 10 events only.
	tail := &handTail{}
	if err := copies.Start(ctx, tail); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 10; seq++ {
		m, err := log.Log.Get(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		tail.hand(m)
	}
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := copies.WaitThrough(wait, 10); err != nil {
		t.Fatal(err)
	}
	copied := copies.Log(log)
	log.gets.Store(0)
	m, err := copied.Get(ctx, 12)
	if err != nil || m.Seq != 12 || log.gets.Load() != 1 {
		t.Fatalf("Get(12) = %+v, %v after %d reads of the log; want the log's event", m, err, log.gets.Load())
	}
	got, err := copied.Range(ctx, ">", 8, 100)
	if err != nil {
		t.Fatal(err)
	}
	want, err := log.Log.Range(ctx, ">", 8, 100)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, "Range(8, 100) across the copies' end", got, want)

	// A copy that is not one (damaged) is read from the log.
	if err := disk.Write([]bus.DiskWrite{{Key: projection.CopyKey(3), Val: []byte{9, 9}}}); err != nil {
		t.Fatal(err)
	}
	log.gets.Store(0)
	if m, err := copied.Get(ctx, 3); err != nil || m.Seq != 3 || log.gets.Load() != 1 {
		t.Fatalf("Get(3) of a damaged copy = %+v, %v after %d reads of the log; want the log's event", m, err, log.gets.Load())
	}
}

func TestEventCopiesGoOnFromWhatTheDiskHolds(t *testing.T) {
	log := storedEvents(t, 6, 0)
	dir := t.TempDir()
	disk := localstoretest.Open(t, dir)
	copies := projection.NewEventCopies(disk, slog.New(slog.DiscardHandler))
	ctx, stop := context.WithCancel(t.Context())
	if err := copies.Start(ctx, bus.LogTail(log, bus.Subjects{Prefix: "agentbus"})); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := copies.WaitThrough(wait, 6); err != nil {
		t.Fatal(err)
	}
	stop()
	for i := range 3 {
		if _, err := log.Append(t.Context(), []*bus.Message{{Subject: "agentbus.evt.a.Order.s1.Shipped", Data: fmt.Appendf(nil, `{"n":%d}`, i)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	again := projection.NewEventCopies(disk, slog.New(slog.DiscardHandler))
	if held, err := again.Progress(); err != nil || held != 6 {
		t.Fatalf("Progress = %d, %v; want 6", held, err)
	}
	startOnLog(t, log, 9, again.Start, again.WaitThrough)
	log.gets.Store(0)
	for seq := uint64(1); seq <= 9; seq++ {
		if _, err := again.Log(log).Get(t.Context(), seq); err != nil {
			t.Fatal(err)
		}
	}
	if n := log.gets.Load(); n != 0 {
		t.Fatalf("%d reads by sequence went to the log after the restart; want none", n)
	}
}
