package crash_test

// A crash test of the read models on the replica's disk (<data>/index: the
// correlation index's history and the type index): agentbus is killed with
// SIGKILL several times, at random moments of a steady load, while those
// models are being written, and started again on the same data directory
// each time. Each restart must resume the store the kill left (not rebuild
// it) and take in what the logs gained past it before it serves. Once the
// load is processed and the duplicate window has passed, only the disk
// can answer (NATS holds no receipts: no receipts bucket exists): every
// command answered 202 has exactly its events by correlation id, the
// events of a type page through exactly one OrderPlaced per order, and a
// command submitted again is answered with its id and not queued.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// indexKills is how many times the load is cut by SIGKILL.
	indexKills = 4
	// indexDuplicateWindow is the command stream's duplicate window
	// (streams.duplicateWindow).
	indexDuplicateWindow = 2 * time.Second
)

// steadyLoad submits PlaceOrder commands from several goroutines until
// stop, across the kills and restarts of one target. A submission cut by a
// kill has no answer and is not counted; while the process is down none is
// sent; any answer but 202 from a serving process is a failure.
type steadyLoad struct {
	base    string
	down    atomic.Bool // the process is being killed or started again
	stopped atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	acc     []accepted
	bad     []string
	last    time.Time // of the last 202
}

func startSteadyLoad(base string, workers int) *steadyLoad {
	l := &steadyLoad{base: base}
	var n atomic.Int64
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for !l.stopped.Load() {
				if l.down.Load() {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				orderID := fmt.Sprintf("idx-%d", n.Add(1))
				body := placeOrder(orderID)
				status, id, err := submit(l.base, body)
				l.mu.Lock()
				switch {
				case err != nil && l.down.Load():
					// Cut by the kill: its answer is unknown.
				case err != nil:
					l.bad = append(l.bad, err.Error())
				case status == http.StatusAccepted:
					l.acc = append(l.acc, accepted{corr: id, orderID: orderID, body: body})
					l.last = time.Now()
				default:
					l.bad = append(l.bad, fmt.Sprintf("%d %s", status, id))
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

// accepted returns how many commands got 202 so far.
func (l *steadyLoad) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acc)
}

// stop ends the load and returns the commands that got 202 and when the
// last did; it fails t when a serving process answered anything else.
func (l *steadyLoad) stop(t *testing.T) ([]accepted, time.Time) {
	t.Helper()
	l.stopped.Store(true)
	l.wg.Wait()
	if len(l.bad) > 0 {
		t.Fatalf("%d submissions to a serving agentbus were not answered 202, first: %s", len(l.bad), l.bad[0])
	}
	if len(l.acc) == 0 {
		t.Fatal("no command accepted")
	}
	return l.acc, l.last
}

// caughtUp reads the line a start of agentbus logs once its read models
// on disk hold the logs: how much of the logs the disk held when it
// started (history's command and event parts, the type index) and how much
// the logs had then.
type caughtUp struct {
	heldCommands, heldEvents, heldTypes, ofCommands, ofEvents uint64
}

var caughtUpLine = regexp.MustCompile(`msg="the read models on disk caught up with the logs" (.*)`)

// readCaughtUp returns what p's line says. The line is logged before p
// serves, but its output may reach the test after an answer does: it is
// waited for a moment.
func readCaughtUp(t *testing.T, p *testkit.Process) caughtUp {
	t.Helper()
	var m [][]string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		m = caughtUpLine.FindAllStringSubmatch(p.Output(), -1)
		if len(m) > 0 || time.Now().After(end) {
			break
		}
	}
	if len(m) != 1 {
		t.Fatalf("%d lines saying the read models on disk caught up with the logs, want 1:\n%s", len(m), p.Output())
	}
	var c caughtUp
	fields := map[string]*uint64{"heldCommands": &c.heldCommands, "heldEvents": &c.heldEvents, "heldTypes": &c.heldTypes,
		"ofCommands": &c.ofCommands, "ofEvents": &c.ofEvents}
	for _, kv := range strings.Fields(m[0][1]) {
		k, v, _ := strings.Cut(kv, "=")
		if p := fields[k]; p != nil {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("%s in %q: %v", k, m[0][0], err)
			}
			*p = n
			delete(fields, k)
		}
	}
	if len(fields) > 0 {
		t.Fatalf("%q lacks %d of its fields", m[0][0], len(fields))
	}
	return c
}

// noReceiptsInNATS fails t when NATS holds a receipts bucket or a
// consumer named receipts (bus.ReceiptsConsumer) on the command or event
// stream: the correlation index is the replica's history on disk alone.
func noReceiptsInNATS(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.KeyValue(ctx, "AGENTBUS_RECEIPTS"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("the receipts bucket: %v; want none", err)
	}
	for _, stream := range []string{"AGENTBUS_COMMANDS", "AGENTBUS_EVENTS"} {
		if _, err := js.Consumer(ctx, stream, "receipts"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatalf("a receipts consumer on %s: %v; want none", stream, err)
		}
	}
}

// checkByType pages through GET /events?type=OrderPlaced (the type index
// on disk): no event twice, exactly one per accepted order, and the same
// orders as the log's OrderPlaced events (placed).
func checkByType(t *testing.T, base string, acc []accepted, placed map[string]bool) (pages int) {
	t.Helper()
	seen := map[string]bool{}
	byOrder := map[string]int{}
	after := ""
	for {
		q := url.Values{"type": {"OrderPlaced"}, "limit": {"1000"}}
		if after != "" {
			q.Set("after", after)
		}
		pg, err := getPage(base, q)
		if err != nil {
			t.Fatal(err)
		}
		if pg.Next == "" {
			t.Fatal("GET /events?type=OrderPlaced: a page without next")
		}
		after = pg.Next
		if len(pg.Events) == 0 {
			break
		}
		pages++
		for _, raw := range pg.Events {
			var e event
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("event is not an envelope: %v: %s", err, raw)
			}
			if e.Type != "OrderPlaced" {
				t.Fatalf("GET /events?type=OrderPlaced returned a %s event", e.Type)
			}
			if seen[e.ID] {
				t.Errorf("GET /events?type=OrderPlaced returned event %s twice", e.ID)
			}
			seen[e.ID] = true
			byOrder[e.Data.OrderID]++
		}
	}
	for _, a := range acc {
		if n := byOrder[a.orderID]; n != 1 {
			t.Errorf("GET /events?type=OrderPlaced: accepted order %s placed %d times, want 1", a.orderID, n)
		}
	}
	for id := range placed {
		if byOrder[id] == 0 {
			t.Errorf("GET /events?type=OrderPlaced: order %s, placed in the log, is missing", id)
		}
	}
	for id := range byOrder {
		if !placed[id] {
			t.Errorf("GET /events?type=OrderPlaced: order %s is not placed in the log", id)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return pages
}

func TestKillNineWhileIndexing(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "agentbus.yaml")
	cfg := fmt.Sprintf(`{"streams":{"duplicateWindow":%q}}`, indexDuplicateWindow)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newTarget(t, "--config", cfgFile)
	began := time.Now()
	p := g.start(t, 1)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("kill moments drawn with seed %d", seed)

	load := startSteadyLoad(g.base, 8)
	var behind struct{ commands, events, types int }
	for kill := 1; kill <= indexKills; kill++ {
		time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond))))
		load.down.Store(true)
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = p.Wait()
		p = g.start(t, kill+1)
		for _, damaged := range []string{"is damaged", "hold more of the logs than the logs have"} {
			if strings.Contains(p.Output(), damaged) {
				t.Fatalf("restart %d did not resume the store the kill left: its log says it %s", kill, damaged)
			}
		}
		// No command was submitted while the process was down, and none
		// is processed before the read models catch up: the logs at the
		// restart are the logs at the kill.
		c := readCaughtUp(t, p)
		t.Logf("kill %d, %d commands accepted so far: the logs at %d commands and %d events; on disk the history held %d and %d, the type index %d",
			kill, load.accepted(), c.ofCommands, c.ofEvents, c.heldCommands, c.heldEvents, c.heldTypes)
		if c.heldCommands > c.ofCommands || c.heldEvents > c.ofEvents || c.heldTypes > c.ofEvents {
			t.Fatalf("restart %d: the disk held more than the logs", kill)
		}
		// The store the kill left is taken up where it was, not rebuilt:
		// it holds something of logs that hold more than a few batches'
		// worth (a batch is written at least every 10 ms).
		if c.ofCommands > 100 && c.ofEvents > 100 && (c.heldCommands == 0 || c.heldEvents == 0 || c.heldTypes == 0) {
			t.Fatalf("restart %d: the disk held nothing of the logs (%d, %d, %d): the store was not resumed", kill, c.heldCommands, c.heldEvents, c.heldTypes)
		}
		if c.heldCommands < c.ofCommands {
			behind.commands++
		}
		if c.heldEvents < c.ofEvents {
			behind.events++
		}
		if c.heldTypes < c.ofEvents {
			behind.types++
		}
		client.Transport.(*http.Transport).CloseIdleConnections()
		load.down.Store(false)
	}
	if behind.commands == 0 || behind.events == 0 || behind.types == 0 {
		t.Fatalf("no kill found a read model on disk behind its log (history commands %d, events %d, type index %d times): no kill cut them mid-write",
			behind.commands, behind.events, behind.types)
	}
	time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond))))
	acc, last := load.stop(t)
	t.Logf("%d commands accepted across %d kills; the history on disk was behind at %d kills (commands), %d (events), the type index at %d",
		len(acc), indexKills, behind.commands, behind.events, behind.types)

	// (a) Every accepted command has exactly its event.
	js := testkit.JetStream(t, "nats://"+g.natsAddr, nats.Timeout(5*time.Second))
	if dw := testkit.StreamInfo(t, js, "AGENTBUS_COMMANDS").Config.Duplicates; dw != indexDuplicateWindow {
		t.Fatalf("the command stream's duplicate window is %v, want %v", dw, indexDuplicateWindow)
	}
	waitAllPlaced(t, g.base, acc, time.Now().Add(45*time.Second))
	testkit.WaitIdle(t, js, testkit.PipelineConsumers()...)
	placed := map[string]bool{}
	for _, e := range checkLog(t, g.base, acc) {
		placed[e.Data.OrderID] = true
	}

	// (b) With no receipt in NATS, the history on disk answers: exactly
	// its event for every accepted command; the type index on disk, one
	// OrderPlaced per order.
	noReceiptsInNATS(t, js)
	time.Sleep(time.Until(last.Add(indexDuplicateWindow + 500*time.Millisecond)))
	checkByCorrelation(t, g.base, acc, time.Now().Add(10*time.Second))
	pages := checkByType(t, g.base, acc, placed)
	t.Logf("all %d accepted commands answered by the history on disk; %d orders in %d pages by type", len(acc), len(placed), pages)

	// (c) Submitted again past the duplicate window, which the history
	// alone remembers: the same id, nothing queued.
	checkResubmit(t, g.base, g.natsAddr, acc)
	noReceiptsInNATS(t, js)

	if err := p.Stop(t, 20*time.Second); err != nil {
		t.Fatalf("agentbus exited with %v after SIGTERM, want 0", err)
	}
	t.Logf("done in %v", time.Since(began).Round(time.Millisecond))
}
