package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/localstore/localstoretest"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// diskReplica starts and stops agentbus replicas that keep their data in
// one directory, on one NATS server.
type diskReplica struct {
	t             *testing.T
	natsURL, data string
	js            jetstream.JetStream
	mutate        []func(*settings.Config)
}

func newDiskReplica(t *testing.T, mutate ...func(*settings.Config)) *diskReplica {
	natsURL := testkit.NATSServer(t)
	return &diskReplica{t: t, natsURL: natsURL, data: t.TempDir(), js: testkit.JetStream(t, natsURL), mutate: mutate}
}

func (d *diskReplica) start() *server.Server {
	d.t.Helper()
	return start(d.t, append([]func(*settings.Config){regOn(d.natsURL), func(c *settings.Config) { c.Data = d.data }}, d.mutate...)...)
}

func (d *diskReplica) stop(s *server.Server) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		d.t.Fatal(err)
	}
}

// index is where the replica keeps its read models on disk.
func (d *diskReplica) index() string { return filepath.Join(d.data, server.DiskDir) }

// copies is where the replica keeps its copies of the events.
func (d *diskReplica) copies() string { return filepath.Join(d.data, server.CopiesDir) }

// lastSeqs returns the command log's and the event log's last sequences.
func (d *diskReplica) lastSeqs() (commands, events uint64) {
	d.t.Helper()
	return testkit.StreamState(d.t, d.js, "AGENTBUS_COMMANDS").LastSeq, testkit.StreamState(d.t, d.js, "AGENTBUS_EVENTS").LastSeq
}

// diskAnswers is what a replica's read models on disk say of commands.
type diskAnswers struct {
	receipts map[string]projection.Receipt
	placed   []uint64
}

// answers reads what s's history and type index say of ids. Just
// started, they must hold the logs up to where they end (a replica catches
// up before its Start returns); running, answers waits until they do.
func (d *diskReplica) answers(s *server.Server, ids []string, justStarted bool) diskAnswers {
	d.t.Helper()
	commands, events := d.lastSeqs()
	holds := func() error {
		if c, e := s.History.Through(); c < commands || e < events {
			return fmt.Errorf("the history holds the logs up to %d and %d of %d and %d", c, e, commands, events)
		}
		if got := s.TypeIndex.Through(); got < events {
			return fmt.Errorf("the type index holds the log up to %d of %d", got, events)
		}
		return nil
	}
	if justStarted {
		if err := holds(); err != nil {
			d.t.Fatalf("started: %v", err)
		}
	} else {
		testkit.Eventually(d.t, "the read models on disk hold the logs", func() bool { return holds() == nil })
	}
	a := diskAnswers{receipts: map[string]projection.Receipt{}}
	for _, id := range ids {
		r, err := s.History.Get("default", id)
		if err != nil {
			d.t.Fatalf("history of %s: %v", id, err)
		}
		r.UpdatedAt = time.Time{}
		a.receipts[id] = *r
	}
	a.placed, _ = s.TypeIndex.Find("default", []string{"OrderPlaced"}, 0, 1000)
	return a
}

func (a diskAnswers) equal(b diskAnswers) error {
	if !slices.Equal(a.placed, b.placed) {
		return fmt.Errorf("OrderPlaced at %v, before at %v", b.placed, a.placed)
	}
	for id, r := range a.receipts {
		o := b.receipts[id]
		if r.Status != o.Status || r.CommandSeq != o.CommandSeq || r.CommandID != o.CommandID || r.Type != o.Type ||
			!slices.Equal(r.Events, o.Events) {
			return fmt.Errorf("receipt of %s: %+v, before %+v", id, o, r)
		}
	}
	return nil
}

// placeOrders submits n orders and waits for their events.
func placeOrders(t *testing.T, s *server.Server, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		ids = append(ids, submitCommand(t, s.URL, placeOrder(fmt.Sprintf("%s-%d", prefix, i))))
	}
	for _, id := range ids {
		eventsOf(t, s.URL, id, 1)
	}
	return ids
}

// TestIndexRebuiltWhenDeletedOrDamaged: a replica whose read models on
// disk, and copies of the events, were deleted, or whose tables were
// truncated mid-file, while it was stopped, rebuilds the models from the
// logs before its Start returns, and answers as before; it makes its
// copies again from the log, and answers the same from them.
func TestIndexRebuiltWhenDeletedOrDamaged(t *testing.T) {
	t.Parallel()
	for _, damage := range []string{"deleted", "truncated"} {
		t.Run(damage, func(t *testing.T) {
			t.Parallel()
			d := newDiskReplica(t)
			s := d.start()
			ids := placeOrders(t, s, "o-"+damage, 30)
			before := d.answers(s, ids, false)
			if len(before.placed) != 30 {
				t.Fatalf("the type index holds %d OrderPlaced; want 30", len(before.placed))
			}
			d.stop(s)
			switch damage {
			case "deleted":
				for _, dir := range []string{d.index(), d.copies()} {
					if err := os.RemoveAll(dir); err != nil {
						t.Fatal(err)
					}
				}
			case "truncated":
				tables, _ := filepath.Glob(filepath.Join(d.index(), "*.sst"))
				copies, _ := filepath.Glob(filepath.Join(d.copies(), "*.sst"))
				if len(tables) == 0 || len(copies) == 0 {
					t.Fatal("no table on disk to truncate: a stopped replica writes its read models and copies to tables")
				}
				for _, f := range append(tables, copies...) {
					fi, err := os.Stat(f)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.Truncate(f, fi.Size()/2); err != nil {
						t.Fatal(err)
					}
				}
			}
			s = d.start()
			if err := before.equal(d.answers(s, ids, true)); err != nil {
				t.Fatalf("after the store was %s: %v", damage, err)
			}
			// Through HTTP too, before the copies are made again (from the
			// log, for some) and after (from them).
			for _, id := range ids {
				if got := eventsOf(t, s.URL, id, 1); got[0]["type"] != "OrderPlaced" {
					t.Fatalf("events of %s: %v", id, got)
				}
			}
			_, events := d.lastSeqs()
			testkit.Eventually(t, "the copies of the events made again", func() bool { return s.Copies.Through() >= events })
			for _, id := range ids {
				if got := eventsOf(t, s.URL, id, 1); got[0]["type"] != "OrderPlaced" {
					t.Fatalf("events of %s from the copies: %v", id, got)
				}
			}
		})
	}
}

// TestIndexStartsBehindAndCatchesUp: a replica whose read models on disk
// are older than the logs (commands were processed while it was stopped)
// takes in what it missed before its Start returns; then a command
// submitted again long after it was accepted (past the duplicate window,
// so that only the history remembers it) is answered with its id, and
// nothing is queued.
func TestIndexStartsBehindAndCatchesUp(t *testing.T) {
	t.Parallel()
	d := newDiskReplica(t, func(c *settings.Config) { c.Streams.DuplicateWindow = settings.Duration(time.Second) })
	s := d.start()
	early := placeOrders(t, s, "o-early", 10)
	d.stop(s)
	old := d.index() + ".old"
	if err := os.CopyFS(old, os.DirFS(d.index())); err != nil {
		t.Fatal(err)
	}
	s = d.start()
	late := placeOrders(t, s, "o-late", 10)
	lateEnvelope := placeOrder("o-again")
	again := submitCommand(t, s.URL, lateEnvelope)
	eventsOf(t, s.URL, again, 1)
	d.stop(s)
	if err := os.RemoveAll(d.index()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(old, d.index()); err != nil {
		t.Fatal(err)
	}
	s = d.start()
	got := d.answers(s, slices.Concat(early, late, []string{again}), true)
	if len(got.placed) != 21 {
		t.Fatalf("the type index holds %d OrderPlaced; want 21", len(got.placed))
	}
	time.Sleep(1500 * time.Millisecond) // past the duplicate window
	commands, _ := d.lastSeqs()
	if id := submitCommand(t, s.URL, lateEnvelope); id != again {
		t.Fatalf("submitted again: id %s; want %s", id, again)
	}
	if now, _ := d.lastSeqs(); now != commands {
		t.Fatalf("submitted again, the command log went from %d to %d messages", commands, now)
	}
}

// TestAcceptedBeforeWhenTheHistoryLags: whether a command was accepted
// before is told by the history on disk. Lagging (here: told of a command
// it never takes in) by more than half the duplicate window, the history
// is first brought up to the command log's end, not to what it was told:
// a command accepted before, past the log's own duplicate window, is
// still answered with its id and not stored again, and a new one is
// stored. Lagging by more than the window, a submission is 503, to be
// sent again, and nothing is stored.
func TestAcceptedBeforeWhenTheHistoryLags(t *testing.T) {
	t.Parallel()
	const window = 10 * time.Second
	d := newDiskReplica(t, func(c *settings.Config) { c.Streams.DuplicateWindow = settings.Duration(window) })
	s := d.start()
	oldEnv := placeOrder("o-old")
	commands, _ := d.lastSeqs()
	old := submitCommand(t, s.URL, oldEnv)
	stored := time.Now() // the command is in the log by now
	if now, _ := d.lastSeqs(); now != commands+1 {
		t.Fatalf("with the history current, the command log went from %d to %d; want the command stored", commands, now)
	}
	testkit.Eventually(t, "the history holds the stored command", func() bool {
		held, _ := s.History.Through()
		return held == commands+1
	})
	time.Sleep(time.Until(stored.Add(window/2 - 500*time.Millisecond)))
	s.History.Appended(1 << 40) // never stored: the history will not hold it
	lagging := time.Now()
	// Past half the window behind, and past the log's duplicate window
	// of the command accepted before.
	time.Sleep(time.Until(latest(lagging.Add(window/2+500*time.Millisecond), stored.Add(window+500*time.Millisecond))))
	commands, _ = d.lastSeqs()
	if id := submitCommand(t, s.URL, oldEnv); id != old {
		t.Fatalf("with the history lagging, the command accepted before: id %s, want %s", id, old)
	}
	if now, _ := d.lastSeqs(); now != commands {
		t.Fatalf("with the history lagging, the command accepted before went into the command log again (%d to %d)", commands, now)
	}
	submitCommand(t, s.URL, placeOrder("o-lagging"))
	if now, _ := d.lastSeqs(); now != commands+1 {
		t.Fatalf("with the history lagging, a new command: the command log went from %d to %d; want it stored", commands, now)
	}
	if time.Since(lagging) >= window {
		t.Fatal("the history lagged past the whole window before the checks within it ended: the machine is too slow for this test")
	}
	commands, _ = d.lastSeqs()
	time.Sleep(time.Until(lagging.Add(window + 500*time.Millisecond))) // past the whole window
	r := postJSON(t, s.URL+"/commands", placeOrder("o-too-late"))
	if r.Status != 503 || r.errorCode(t) != "SERVICE_UNAVAILABLE" {
		t.Fatalf("with the history lagging past the window: %d %s; want 503 SERVICE_UNAVAILABLE", r.Status, r.Body)
	}
	if now, _ := d.lastSeqs(); now != commands {
		t.Fatalf("refused, the command log went from %d to %d", commands, now)
	}
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// registriesHeld returns the sequence of the event log up to which the
// registries' copy in the stopped replica's index holds them.
func (d *diskReplica) registriesHeld() uint64 {
	d.t.Helper()
	disk := localstoretest.Open(d.t, d.index())
	defer disk.Close() // before the replica starts again on it
	held, err := projection.NewRegistries(nil, disk, bus.Subjects{}, slog.New(slog.DiscardHandler)).Progress()
	if err != nil {
		d.t.Fatal(err)
	}
	return held
}

// TestRegistriesStartFromTheDisk: a replica restarted on its data
// directory answers every list and get of agents, services and
// subscriptions as before, from the registries' copy in its index, which
// held them up to the end of the event log when it stopped; so it does
// from an older copy, taking in what changed since (deletions too), and
// from none, once the index was deleted, writing the copy anew.
func TestRegistriesStartFromTheDisk(t *testing.T) {
	t.Parallel()
	d := newDiskReplica(t, regCatalogs, suLoopback, regMultiTenant)
	heldToTheEnd := func(when string) {
		t.Helper()
		if _, events := d.lastSeqs(); d.registriesHeld() != events {
			t.Fatalf("%s, the registries' copy on disk holds the event log up to %d of %d", when, d.registriesHeld(), events)
		}
	}
	s := d.start()
	subs := fillRegistries(t, s.URL)
	want := registryAnswers(t, s.URL, subs)
	d.stop(s)
	heldToTheEnd("stopped")
	old := d.index() + ".old"
	if err := os.CopyFS(old, os.DirFS(d.index())); err != nil {
		t.Fatal(err)
	}
	s = d.start()
	sameAnswers(t, "after a restart", registryAnswers(t, s.URL, subs), want)

	b := s.URL + "/acme"
	auExpect(t, "delete", do(t, "DELETE", b+"/agents/ag-01", "", nil), 204, "")
	auExpect(t, "delete", do(t, "DELETE", b+"/subscriptions/"+subs["acme"][0], "", nil), 204, "")
	auExpect(t, "pause", do(t, "POST", b+"/agents/ag-02/pause", "", nil), 204, "")
	auExpect(t, "service", postJSON(t, b+"/services", map[string]any{"id": "svc-late", "name": "late"}), 201, "")
	auExpect(t, "delete", do(t, "DELETE", b+"/services/svc-ag-07", "", nil), 204, "")
	want = registryAnswers(t, s.URL, subs)
	if !strings.HasPrefix(want["/acme/agents/ag-01"], "404") || !strings.HasPrefix(want["/acme/subscriptions/"+subs["acme"][0]], "404") ||
		!strings.Contains(want["/acme/services"], "svc-late") {
		t.Fatalf("unexpected state after the changes: %v", want)
	}
	d.stop(s)
	heldToTheEnd("stopped again")
	if err := os.RemoveAll(d.index()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(old, d.index()); err != nil {
		t.Fatal(err)
	}
	s = d.start()
	sameAnswers(t, "started on an older copy", registryAnswers(t, s.URL, subs), want)
	d.stop(s)

	if err := os.RemoveAll(d.index()); err != nil {
		t.Fatal(err)
	}
	s = d.start()
	sameAnswers(t, "after the index was deleted", registryAnswers(t, s.URL, subs), want)
	d.stop(s)
	heldToTheEnd("rebuilt and stopped")
}

// TestIndexRebuiltWhenTheCommandsAgedOut: a replica whose read models
// are rebuilt (its index deleted) while every command has aged out of the
// command log (streams.commandMaxAge) starts: it waits for the last
// command still stored, none, not for the log's last sequence, which no
// follower is ever handed.
func TestIndexRebuiltWhenTheCommandsAgedOut(t *testing.T) {
	t.Parallel()
	d := newDiskReplica(t, func(c *settings.Config) {
		c.Streams.DuplicateWindow, c.Streams.CommandMaxAge = settings.Duration(time.Second), settings.Duration(time.Second)
	})
	s := d.start()
	ids := placeOrders(t, s, "o-aged", 3)
	d.stop(s)
	if err := os.RemoveAll(d.index()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the commands aged out", func() bool {
		return testkit.StreamState(t, d.js, "AGENTBUS_COMMANDS").Msgs == 0
	})
	s = d.start()
	for _, id := range ids { // the events' part, rebuilt from the event log
		if got := eventsOf(t, s.URL, id, 1); got[0]["type"] != "OrderPlaced" {
			t.Fatalf("events of %s: %v", id, got)
		}
	}
}
