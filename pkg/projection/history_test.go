package projection_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/localstore/localstoretest"
	"github.com/agentbus/agentbus/pkg/projection"
)

// historyLogs are a command log and an event log with one command
// processed (two events), one rejected and one still waiting.
func historyLogs() (commands, events *storedLog, placed, rejected, waiting string) {
	cmd := func(seq uint64, id, typ string) *bus.Message {
		return &bus.Message{Subject: "agentbus.cmd.a." + typ, Seq: seq,
			Data: []byte(`{"specversion":"1.0","id":"` + id + `","source":"test","type":"` + typ + `","time":"2026-11-29T08:00:00Z","data":{}}`)}
	}
	evt := func(seq uint64, corr, subject string, cmdSeq string, data string) *bus.Message {
		return &bus.Message{Subject: subject, Seq: seq, Data: []byte(data),
			Header: bus.Header{bus.HeaderCorrelationID: {corr}, bus.HeaderCommandSeq: {cmdSeq}, bus.HeaderCommandType: {"PlaceOrder"}}}
	}
	placed = envelope.CorrelationID("a", "test", "c1")
	rejected = envelope.CorrelationID("a", "test", "c2")
	waiting = envelope.CorrelationID("a", "test", "c3")
	commands = &storedLog{msgs: []*bus.Message{cmd(1, "c1", "PlaceOrder"), cmd(2, "c2", "PlaceOrder"), cmd(3, "c3", "ShipOrder"),
		cmd(4, "c1", "PlaceOrder")}} // 4: a copy of c1, which stays the command at 1
	events = &storedLog{msgs: []*bus.Message{
		evt(1, placed, "agentbus.evt.a.Order.o1.OrderPlaced", "1", `{"data":{}}`),
		{Subject: "agentbus.evt.a.Order.o9.Other", Seq: 2},
		evt(3, rejected, "agentbus.evt.a.Order.o2.CommandRejected", "2", `{"data":{"code":"CONFLICT","message":"taken"}}`),
		evt(4, placed, "agentbus.evt.a.Order.o1.OrderPriced", "1", `{"data":{}}`),
	}}
	return
}

// startHistory starts a history of the logs on disk and waits until it
// holds them.
func startHistory(t *testing.T, disk bus.Disk, commands, events *storedLog) *projection.History {
	t.Helper()
	subj := bus.Subjects{Prefix: "agentbus"}
	h := projection.NewHistory(disk, commands, subj, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := h.Start(ctx, bus.LogTail(events, subj)); err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := h.WaitThrough(wait, uint64(len(commands.msgs)), uint64(len(events.msgs))); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHistoryHoldsEveryReceipt: the history on disk gives each command's
// receipt from its command and its events, as the receipts bucket would.
func TestHistoryHoldsEveryReceipt(t *testing.T) {
	commands, events, placed, rejected, waiting := historyLogs()
	h := startHistory(t, localstoretest.Open(t, ""), commands, events)
	r, err := h.Get("a", placed)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != projection.StatusProcessed || !slices.Equal(r.Events, []uint64{1, 4}) || r.CommandSeq != 1 ||
		r.CommandID != "c1" || r.Type != "PlaceOrder" || r.Source != "test" || r.Time != "2026-11-29T08:00:00Z" {
		t.Errorf("processed receipt = %+v", r)
	}
	if r, err := h.Get("a", rejected); err != nil || r.Status != projection.StatusRejected || r.Rejection == nil ||
		r.Rejection.Code != "CONFLICT" || !slices.Equal(r.Events, []uint64{3}) {
		t.Errorf("rejected receipt = %+v, %v", r, err)
	}
	if r, err := h.Get("a", waiting); err != nil || r.Status != projection.StatusAccepted || r.Type != "ShipOrder" || len(r.Events) != 0 {
		t.Errorf("waiting receipt = %+v, %v", r, err)
	}
	if _, err := h.Get("a", "never"); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("unknown command: %v, want not found", err)
	}
	if _, err := h.Get("b", placed); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("another tenant's command: %v, want not found", err)
	}
}

// TestHistoryReadsANewCommandOnce: the parts of a new command's receipt
// that its submission found absent (Accepted) are not read again by the
// followers that write them, and the receipt is the same.
func TestHistoryReadsANewCommandOnce(t *testing.T) {
	disk := &readCountedDisk{Disk: localstoretest.Open(t, "")}
	commands, events := &handLog{}, &handTail{}
	h := startHandHistory(t, disk, commands, events, slog.New(slog.DiscardHandler))
	corr := envelope.CorrelationID("a", "test", "c1")
	disk.reads.Store(0)
	if old, err := h.Accepted("a", corr); err != nil || old {
		t.Fatalf("a new command accepted before: %v, %v", old, err)
	}
	if n := disk.reads.Load(); n != 2 {
		t.Fatalf("Accepted read %d keys, want its two parts", n)
	}
	commands.fn(&bus.Message{Subject: "agentbus.cmd.a.PlaceOrder", Seq: 1,
		Data: []byte(`{"specversion":"1.0","id":"c1","source":"test","type":"PlaceOrder","time":"2026-11-29T08:00:00Z","data":{}}`)})
	events.hand(&bus.Message{Subject: "agentbus.evt.a.Order.o1.OrderPlaced", Seq: 1, Data: []byte(`{"data":{}}`),
		Header: bus.Header{bus.HeaderCorrelationID: {corr}, bus.HeaderCommandSeq: {"1"}, bus.HeaderCommandType: {"PlaceOrder"}}})
	if n := disk.reads.Load(); n != 2 {
		t.Errorf("the followers read %d parts the submission had found absent", n-2)
	}
	events.hand(&bus.Message{Subject: "agentbus.evt.a.Order.o1.OrderPriced", Seq: 2, Data: []byte(`{"data":{}}`),
		Header: bus.Header{bus.HeaderCorrelationID: {corr}, bus.HeaderCommandSeq: {"1"}, bus.HeaderCommandType: {"PlaceOrder"}}})
	r, err := h.Get("a", corr)
	if err != nil || r.Status != projection.StatusProcessed || r.CommandID != "c1" || r.CommandSeq != 1 || !slices.Equal(r.Events, []uint64{1, 2}) {
		t.Errorf("receipt = %+v, %v; want both events", r, err)
	}
}

// readCountedDisk is a replica's disk that counts its reads.
type readCountedDisk struct {
	bus.Disk
	reads atomic.Int64
}

func (d *readCountedDisk) Get(key []byte) ([]byte, bool, error) {
	d.reads.Add(1)
	return d.Disk.Get(key)
}

// TestHistoryAcceptedAndProcessed: Accepted says whether a command's
// receipt has a part (its command's, or its events': an event of a
// command the command log no longer holds), Processed whether it lists
// events, as Get's would; neither answers until the history has caught
// up.
func TestHistoryAcceptedAndProcessed(t *testing.T) {
	commands, events, placed, rejected, waiting := historyLogs()
	orphan := envelope.CorrelationID("a", "test", "c9")
	events.msgs = append(events.msgs, &bus.Message{Subject: "agentbus.evt.a.Order.o9.OrderPlaced", Seq: 5, Data: []byte(`{"data":{}}`),
		Header: bus.Header{bus.HeaderCorrelationID: {orphan}}})
	subj := bus.Subjects{Prefix: "agentbus"}
	early := projection.NewHistory(localstoretest.Open(t, ""), commands, subj, slog.New(slog.DiscardHandler))
	if _, err := early.Accepted("a", placed); !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("Accepted before catching up: %v, want unavailable", err)
	}
	if _, err := early.Processed("a", placed); !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("Processed before catching up: %v, want unavailable", err)
	}
	h := startHistory(t, localstoretest.Open(t, ""), commands, events)
	for _, c := range []struct {
		tenant, corr        string
		accepted, processed bool
	}{{"a", placed, true, true}, {"a", rejected, true, true}, {"a", waiting, true, false}, {"a", orphan, true, true},
		{"a", "never", false, false}, {"b", placed, false, false}} {
		if got, err := h.Accepted(c.tenant, c.corr); err != nil || got != c.accepted {
			t.Errorf("Accepted(%s, %s) = %v, %v; want %v", c.tenant, c.corr, got, err, c.accepted)
		}
		got, err := h.Processed(c.tenant, c.corr)
		if err != nil || got != c.processed {
			t.Errorf("Processed(%s, %s) = %v, %v; want %v", c.tenant, c.corr, got, err, c.processed)
		}
		r, err := h.Get(c.tenant, c.corr)
		if listed := err == nil && len(r.Events) > 0; listed != c.processed {
			t.Errorf("Get(%s, %s) lists events: %v, Processed says %v", c.tenant, c.corr, listed, c.processed)
		}
	}
}

// TestHistoryAnswersOnlyOnceCaughtUp: until it holds the logs up to
// where they were at the start, an absent receipt proves nothing, and
// Get says so.
func TestHistoryAnswersOnlyOnceCaughtUp(t *testing.T) {
	commands, _, placed, _, _ := historyLogs()
	subj := bus.Subjects{Prefix: "agentbus"}
	h := projection.NewHistory(localstoretest.Open(t, ""), commands, subj, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tail := &handTail{}
	if err := h.Start(ctx, tail); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Get("a", placed); !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("before catching up: %v, want unavailable", err)
	}
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	if err := h.WaitThrough(short, 4, 1); err == nil {
		t.Fatal("WaitThrough returned before the event log was held")
	}
	tail.hand(&bus.Message{Subject: "agentbus.evt.a.Order.o9.Other", Seq: 1})
	if err := h.WaitThrough(ctx, 4, 1); err != nil {
		t.Fatal(err)
	}
	if r, err := h.Get("a", placed); err != nil || r.Status != projection.StatusAccepted {
		t.Errorf("after catching up: %+v, %v", r, err)
	}
}

// TestHistoryGoesOnFromTheDisk: started again on the same disk, the
// history asks each log only for what follows what it holds.
func TestHistoryGoesOnFromTheDisk(t *testing.T) {
	commands, events, placed, _, _ := historyLogs()
	dir := t.TempDir()
	disk := localstoretest.Open(t, dir)
	startHistory(t, disk, commands, events)
	time.Sleep(30 * time.Millisecond) // nothing more to write
	disk.Close()

	h := projection.NewHistory(localstoretest.Open(t, dir), commands, bus.Subjects{Prefix: "agentbus"}, slog.New(slog.DiscardHandler))
	cmds, evts, err := h.Progress()
	if err != nil || cmds != 4 || evts != 4 {
		t.Fatalf("progress %d, %d, %v; want 4, 4", cmds, evts, err)
	}
	tail := &handTail{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := h.Start(ctx, tail); err != nil {
		t.Fatal(err)
	}
	if len(tail.follows) != 1 || tail.follows[0].from != 5 {
		t.Fatalf("the history follows the event log %+v, want from 5", tail.follows)
	}
	if err := h.WaitThrough(ctx, 4, 4); err != nil {
		t.Fatal(err)
	}
	if r, err := h.Get("a", placed); err != nil || !slices.Equal(r.Events, []uint64{1, 4}) {
		t.Errorf("after the restart: %+v, %v", r, err)
	}
}

// TestHistoryCurrent: History is current while it holds every command
// it learnt of, or learnt of less than maxLag ago; a command it does not
// take in (its follower stopped) turns it not current once maxLag has
// passed, until it holds it.
func TestHistoryCurrent(t *testing.T) {
	commands, _, _, _, _ := historyLogs()
	subj := bus.Subjects{Prefix: "agentbus"}
	h := projection.NewHistory(localstoretest.Open(t, ""), commands, subj, slog.New(slog.DiscardHandler))
	if h.Current(time.Hour) {
		t.Fatal("current before it started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tail := &handTail{}
	if err := h.Start(ctx, tail); err != nil {
		t.Fatal(err)
	}
	tail.hand(&bus.Message{Subject: "agentbus.evt.a.Order.o9.Other", Seq: 1})
	if err := h.WaitThrough(ctx, 4, 1); err != nil {
		t.Fatal(err)
	}
	const lag = 50 * time.Millisecond
	if !h.Current(lag) {
		t.Fatal("not current, holding all it knows of")
	}
	h.Appended(3) // held already
	time.Sleep(2 * lag)
	if !h.Current(lag) {
		t.Fatal("not current, holding the command it learnt of")
	}
	h.Appended(5) // the command log's follower never hands it
	if !h.Current(lag) {
		t.Fatal("not current at once after learning of a command")
	}
	time.Sleep(2 * lag)
	if h.Current(lag) {
		t.Fatal("current although a command stored long ago is not held")
	}
}

// handLog is a command log whose Follow hands messages only when the test
// hands them.
type handLog struct {
	bus.Log
	fn func(*bus.Message)
}

func (l *handLog) Follow(_ context.Context, _ string, _ uint64, fn func(*bus.Message)) { l.fn = fn }

// startHandHistory starts a history on disk of commands, and of the event
// log events hands, both empty; it runs until the test ends.
func startHandHistory(t *testing.T, disk bus.Disk, commands *handLog, events *handTail, log *slog.Logger) *projection.History {
	t.Helper()
	h := projection.NewHistory(disk, commands, bus.Subjects{Prefix: "agentbus"}, log)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := h.Start(ctx, events); err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := h.WaitThrough(wait, 0, 0); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHistoryCurrentWhileCatchingUp: a History that takes in a command it
// learnt of but not the later ones it learnt of meanwhile is not current
// once those are older than maxLag: holding the first does not make it
// current again.
func TestHistoryCurrentWhileCatchingUp(t *testing.T) {
	commands := &handLog{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := startHandHistory(t, localstoretest.Open(t, ""), commands, &handTail{}, slog.New(slog.DiscardHandler))
	const lag = 50 * time.Millisecond
	h.Appended(1)
	h.Appended(2)
	time.Sleep(2 * lag)
	if h.Current(lag) {
		t.Fatal("current, holding neither command it learnt of long ago")
	}
	commands.fn(&bus.Message{Subject: "agentbus.cmd.a.PlaceOrder", Seq: 1, Data: []byte(`{}`)})
	if err := h.WaitThrough(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	if h.Current(lag) {
		t.Fatal("current, holding the first command but not the second, learnt of long ago")
	}
	commands.fn(&bus.Message{Subject: "agentbus.cmd.a.PlaceOrder", Seq: 2, Data: []byte(`{}`)})
	if err := h.WaitThrough(ctx, 2, 0); err != nil {
		t.Fatal(err)
	}
	if !h.Current(lag) {
		t.Fatal("not current, holding every command it learnt of")
	}
}

// TestHistoryUpdatedAtIsTheLogs: a receipt's UpdatedAt is when the log
// stored the message that last changed it, not when this history read
// it, so every replica, and a history rebuilt, gives the same.
func TestHistoryUpdatedAtIsTheLogs(t *testing.T) {
	commands, events, placed, _, waiting := historyLogs()
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	for i, m := range commands.msgs {
		m.Time = at.Add(time.Duration(i) * time.Second)
	}
	for i, m := range events.msgs {
		m.Time = at.Add(time.Minute + time.Duration(i)*time.Second)
	}
	h := startHistory(t, localstoretest.Open(t, ""), commands, events)
	if r, err := h.Get("a", placed); err != nil || !r.UpdatedAt.Equal(events.msgs[3].Time) {
		t.Errorf("processed receipt updated at %v (%v), want its last event's time %v", r.UpdatedAt, err, events.msgs[3].Time)
	}
	if r, err := h.Get("a", waiting); err != nil || !r.UpdatedAt.Equal(commands.msgs[2].Time) {
		t.Errorf("waiting receipt updated at %v (%v), want its command's time %v", r.UpdatedAt, err, commands.msgs[2].Time)
	}
}

// TestHistoryStopsOnAClosedDisk: a message the history reads after its
// disk was closed (the replica stops while the log's follower still hands
// messages) is left for the next start, with no error logged and no
// retrying: the follower goes on at once.
func TestHistoryStopsOnAClosedDisk(t *testing.T) {
	commands := &handLog{}
	dir := t.TempDir()
	disk := localstoretest.Open(t, dir)
	var logged errorsLogged
	startHandHistory(t, disk, commands, &handTail{}, slog.New(&logged))
	disk.Close()
	handed := make(chan struct{})
	go func() {
		defer close(handed)
		commands.fn(&bus.Message{Subject: "agentbus.cmd.a.PlaceOrder", Seq: 1,
			Data: []byte(`{"specversion":"1.0","id":"c1","source":"test","type":"PlaceOrder","data":{}}`)})
	}()
	select {
	case <-handed:
	case <-time.After(10 * time.Second):
		t.Fatal("the follower is still held by a message it cannot read from a closed disk")
	}
	if n := logged.n.Load(); n != 0 {
		t.Fatalf("%d errors logged for a closed disk", n)
	}
	reopened := projection.NewHistory(localstoretest.Open(t, dir), commands, bus.Subjects{Prefix: "agentbus"}, slog.New(slog.DiscardHandler))
	if cmds, evts, err := reopened.Progress(); err != nil || cmds != 0 || evts != 0 {
		t.Fatalf("the disk holds the logs up to %d and %d (%v); want nothing past what was written before it closed", cmds, evts, err)
	}
}

// errorsLogged is a slog.Handler that counts the records at level error.
type errorsLogged struct{ n atomic.Int64 }

func (h *errorsLogged) Enabled(context.Context, slog.Level) bool { return true }
func (h *errorsLogged) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.n.Add(1)
	}
	return nil
}
func (h *errorsLogged) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *errorsLogged) WithGroup(string) slog.Handler      { return h }
