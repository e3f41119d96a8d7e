package natsjs

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// wordLog is a stream "W" on "w.>" of storeLog's server that republishes
// what it stores, whole, on "stored.w.>", and its Log.
func wordLog(t *testing.T) (*Conn, *Log) {
	t.Helper()
	conn, _ := storeLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"}, AllowDirect: true, AllowAtomicPublish: true,
		RePublish: &jetstream.RePublish{Source: "w.>", Destination: "stored.w.>"}}); err != nil {
		t.Fatal(err)
	}
	l, err := conn.Log(ctx, "W")
	if err != nil {
		t.Fatal(err)
	}
	return conn, l
}

// countDirectGets counts the direct gets of stream W asked on the server
// from now on, seen by a connection of its own.
func countDirectGets(t *testing.T, conn *Conn) *atomic.Int64 {
	t.Helper()
	nc, err := nats.Connect(conn.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var n atomic.Int64
	if _, err := nc.Subscribe("$JS.API.DIRECT.GET.W", func(*nats.Msg) { n.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// handed takes the next message a Follow loop handed over, or fails.
func handed(t *testing.T, ch <-chan *bus.Message) *bus.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("nothing handed over in 10 s")
		return nil
	}
}

// followBusy follows the whole of l from its first message into a
// channel of room messages; the loop is busy with the first one until
// release is closed, while the words of the later ones pile up.
func followBusy(ctx context.Context, l *Log, room int) (<-chan *bus.Message, chan struct{}) {
	ch := make(chan *bus.Message, room)
	release := make(chan struct{})
	var first atomic.Bool
	l.Follow(ctx, ">", 1, func(m *bus.Message) {
		if first.CompareAndSwap(false, true) {
			<-release
		}
		ch <- m
	})
	return ch, release
}

// TestFollowTakesTheWordsMessages: a Follow loop of the whole stream takes
// each message from the stream's word of it (its RePublish, whole), as
// stored (subject, sequence, headers, payload), without reading the log
// for each: appends one at a time, each waited for, cost far fewer direct
// gets than appends.
func TestFollowTakesTheWordsMessages(t *testing.T) {
	conn, l := wordLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gets := countDirectGets(t, conn)
	ch := make(chan *bus.Message, 100)
	l.Follow(ctx, ">", 1, func(m *bus.Message) { ch <- m })
	const n = 40
	for i := 1; i <= n; i++ {
		subj := "w.a." + strconv.Itoa(i)
		seq, err := l.Append(ctx, []*bus.Message{{Subject: subj, Header: bus.Header{bus.HeaderMsgID: {"id-" + strconv.Itoa(i)}}, Data: []byte("payload " + strconv.Itoa(i))}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := handed(t, ch)
		if m.Seq != seq || m.Subject != subj || string(m.Data) != "payload "+strconv.Itoa(i) || m.Header.Get(bus.HeaderMsgID) != "id-"+strconv.Itoa(i) || m.Time.IsZero() {
			t.Fatalf("append %d (seq %d): handed seq %d subject %s data %q id %q time %s", i, seq, m.Seq, m.Subject, m.Data, m.Header.Get(bus.HeaderMsgID), m.Time)
		}
	}
	// One read at the start, and one at each poll that came in a pause of
	// followPoll between two appends; a read per append would be n more.
	if g := gets.Load(); g >= n/2 {
		t.Errorf("%d direct gets for %d appends, each taken from the word", g, n)
	}
}

// TestFollowGoesOnPastMissingWords: a loop whose queue of words overflows
// while it is busy, and words that do not add up (a subject other than the
// one the word came on, a headers-only word, a header block nats.go does
// not read whole), still hand over every stored message once, in order:
// what the word did not bring is read from the log.
func TestFollowGoesOnPastMissingWords(t *testing.T) {
	conn, l := wordLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, release := followBusy(ctx, l, 10000)
	if _, err := l.Append(ctx, []*bus.Message{msg("w.first", "")}, nil); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(conn.ClientURL(), "nats://")
	ts := time.Now().UTC().Format(time.RFC3339Nano)
	const batches, per = 30, 100 // 3,000 words, past storedQueue
	for b := range batches {
		batch := make([]*bus.Message, per)
		for i := range batch {
			batch[i] = msg("w.b."+strconv.Itoa(b*per+i), "")
			batch[i].Data = []byte(strconv.Itoa(b*per + i))
		}
		if _, err := l.Append(ctx, batch, nil); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	want := uint64(1 + batches*per)
	for seq := uint64(1); seq <= want; seq++ {
		m := handed(t, ch)
		if m.Seq != seq {
			t.Fatalf("handed seq %d, want %d", m.Seq, seq)
		}
		if seq > 1 && string(m.Data) != strconv.Itoa(int(seq-2)) {
			t.Fatalf("seq %d: payload %q", seq, m.Data)
		}
	}
	// Words that do not add up, for the next sequence: none is handed
	// over; the message then stored is.
	next := want + 1
	for _, f := range []struct{ subject, hdr string }{
		{"stored.w.x", fmt.Sprintf("NATS/1.0\r\nNats-Stream: W\r\nNats-Subject: w.other\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n\r\n", next, ts)},
		{"stored.w.x", fmt.Sprintf("NATS/1.0\r\nNats-Stream: W\r\nNats-Subject: w.x\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\nNats-Msg-Size: 6\r\n\r\n", next, ts)},
		{"stored.w.x", fmt.Sprintf("NATS/1.0\r\nX: y\r\n\r\nNats-Stream: W\r\nNats-Subject: w.x\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n\r\n", next, ts)},
		// As a consumer's delivery to the word's subject comes: the stored
		// message's own headers, and a reply subject (its acknowledgement).
		{"stored.w.x _INBOX.forged", fmt.Sprintf("NATS/1.0\r\nNats-Stream: W\r\nNats-Subject: w.x\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n\r\n", next, ts)},
	} {
		rawPublish(t, addr, f.subject, f.hdr, "forged") // "subject reply": HPUB's two tokens
	}
	if _, err := l.Append(ctx, []*bus.Message{{Subject: "w.x", Header: bus.Header{}, Data: []byte("stored")}}, nil); err != nil {
		t.Fatal(err)
	}
	if m := handed(t, ch); m.Seq != next || string(m.Data) != "stored" || m.Subject != "w.x" {
		t.Fatalf("after the forged words: handed seq %d subject %s data %q, want %d w.x stored", m.Seq, m.Subject, m.Data, next)
	}
	select {
	case m := <-ch:
		t.Fatalf("handed seq %d data %q past the last stored", m.Seq, m.Data)
	case <-time.After(3 * followPoll):
	}
}

// TestFollowBoundsTheWordsItHolds: a busy loop holds no more than
// storedQueueBytes of payload from the word; what it did not hold it
// reads from the log, every message once, in order.
func TestFollowBoundsTheWordsItHolds(t *testing.T) {
	_, l := wordLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, release := followBusy(ctx, l, 1000)
	const n, size = 300, 64 << 10 // 18.75 MiB, fewer messages than storedQueue
	for i := range n {
		m := msg("w.big."+strconv.Itoa(i), "")
		m.Data = []byte(strings.Repeat(strconv.Itoa(i%10), size))
		if _, err := l.Append(ctx, []*bus.Message{m}, nil); err != nil {
			t.Fatal(err)
		}
	}
	fs := l.followers.Load()
	if fs == nil || len(*fs) != 1 {
		t.Fatal("no follow loop")
	}
	f := (*fs)[0]
	// The first message is the one the loop is busy with.
	if held := len(f.stored); held == 0 || held >= n-1 || held*size > storedQueueBytes {
		t.Errorf("the busy loop holds %d of the %d later messages of %d bytes from the word; want some, and no more than %d bytes", held, n-1, size, storedQueueBytes)
	}
	close(release)
	for seq := uint64(1); seq <= n; seq++ {
		m := handed(t, ch)
		if m.Seq != seq || len(m.Data) != size || m.Data[0] != byte('0'+(seq-1)%10) {
			t.Fatalf("handed seq %d (%d bytes), want %d", m.Seq, len(m.Data), seq)
		}
	}
	// A word still on its way is counted until the loop takes it.
	deadline := time.Now().Add(2 * time.Second)
	for f.storedBytes.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if b := f.storedBytes.Load(); b != 0 {
		t.Errorf("%d bytes counted as held once every word was taken", b)
	}
}

// TestAppendsWakeTheLoopUntilAWordComes: a loop of the whole stream is
// woken by this Log's appends until a word brings a message, not after
// (the word will bring them); when its poll finds messages no word
// brought (the stream no longer republishes them), appends wake it again.
func TestAppendsWakeTheLoopUntilAWordComes(t *testing.T) {
	conn, l := wordLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan *bus.Message, 100)
	l.Follow(ctx, ">", 1, func(m *bus.Message) { ch <- m })
	if l.wordHeard.Load() {
		t.Fatal("the word counted as heard before any came")
	}
	if _, err := l.Append(ctx, []*bus.Message{msg("w.a", "")}, nil); err != nil {
		t.Fatal(err)
	}
	handed(t, ch)
	deadline := time.Now().Add(5 * time.Second)
	for !l.wordHeard.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // the word may come after the read the append woke
	}
	if !l.wordHeard.Load() {
		t.Fatal("a whole word came and is not counted as heard")
	}
	// The stream stops republishing: the next message comes from a poll.
	if _, err := conn.JS.UpdateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"}, AllowDirect: true, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, []*bus.Message{msg("w.b", "")}, nil); err != nil {
		t.Fatal(err)
	}
	if m := handed(t, ch); m.Subject != "w.b" {
		t.Fatalf("handed %s, want w.b", m.Subject)
	}
	if l.wordHeard.Load() {
		t.Error("the poll found a message no word brought, and the word still counts as heard")
	}
}
