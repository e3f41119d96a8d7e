package natsjs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// storeLog is an embedded server with one stream "S" on "s.>", reachable
// in-process and on a free loopback port (conn.ClientURL()).
func storeLog(t testing.TB) (*Conn, *Log) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := Connect(ctx, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	l, err := conn.Log(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	return conn, l
}

func msg(subject, id string) *bus.Message {
	h := bus.Header{}
	if id != "" {
		h.Set(bus.HeaderMsgID, id)
	}
	return &bus.Message{Subject: subject, Header: h, Data: []byte("x")}
}

// TestReadsWithoutServerAreUnavailable: with the server gone (as in a leader
// election), every read answers errs.ErrUnavailable (503), never a raw error.
func TestReadsWithoutServerAreUnavailable(t *testing.T) {
	conn, l := storeLog(t)
	if _, err := l.Append(context.Background(), []*bus.Message{msg("s.a", "1")}, nil); err != nil {
		t.Fatal(err)
	}
	conn.stopServer()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := l.LastSeq(ctx); !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("LastSeq: %v, want ErrUnavailable", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := l.Get(ctx, 1); !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("Get: %v, want ErrUnavailable", err)
	}
}

// TestClosedConnectionIsNotRetried: a closed connection never reopens, so
// operations fail at once (as ErrUnavailable) instead of spinning.
func TestClosedConnectionIsNotRetried(t *testing.T) {
	conn, l := storeLog(t)
	for _, err := range []error{nats.ErrConnectionClosed, jetstream.ErrConnectionClosed} {
		if transient(err) || settling(err) {
			t.Errorf("%v counts as retryable", err)
		}
	}
	conn.NC.Close()
	if _, err := l.Get(context.Background(), 1); !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("Get: %v, want ErrUnavailable", err)
	}
	if _, err := l.LastSeq(context.Background()); !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("LastSeq: %v, want ErrUnavailable", err)
	}
	if _, err := l.Append(context.Background(), []*bus.Message{msg("s.a", "1")}, nil); !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("Append: %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := untilSettled(ctx, func(ctx context.Context) error {
		_, err := conn.JS.AccountInfo(ctx)
		return err
	}); err == nil {
		t.Error("untilSettled on a closed connection succeeded")
	}
}

// TestAppendSetsExpectOnTheMessage: the expect headers go on the caller's
// message (Append owns it), and a conditional append is enforced.
func TestAppendSetsExpectOnTheMessage(t *testing.T) {
	_, l := storeLog(t)
	ctx := context.Background()
	m := msg("s.a.1", "m1")
	if _, err := l.Append(ctx, []*bus.Message{m}, &bus.Expect{Subject: "s.a.*", LastSeq: 0}); err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(jetstream.ExpectedLastSubjSeqSubjHeader) != "s.a.*" || m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) != "0" {
		t.Errorf("expect headers not on the message: %v", m.Header)
	}
	_, err := l.Append(ctx, []*bus.Message{msg("s.a.2", "m2"), msg("s.a.3", "m3")}, &bus.Expect{Subject: "s.a.*", LastSeq: 0})
	if !errors.Is(err, errs.ErrConflict) {
		t.Errorf("stale conditional batch: %v, want ErrConflict", err)
	}
}

// TestAppendRetriesOnlyWithMessageIDs: an append is retried only when every
// message carries Nats-Msg-Id; one without is tried once.
func TestAppendRetriesOnlyWithMessageIDs(t *testing.T) {
	if p := appendRetry([]*bus.Message{msg("s.a", "1"), msg("s.b", "2")}); p.retryable == nil || !p.retryable(context.DeadlineExceeded) {
		t.Error("an append whose messages all carry ids is not retried")
	}
	if p := appendRetry([]*bus.Message{msg("s.a", "1"), msg("s.b", "")}); p.retryable(context.DeadlineExceeded) {
		t.Error("an append with a message without id is retried")
	}
	_, l := storeLog(t)
	if _, err := l.Append(context.Background(), []*bus.Message{msg("s.a", "")}, nil); err != nil {
		t.Errorf("append without message id: %v", err)
	}
}

func TestSettling(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"}, true},
		{&jetstream.APIError{Code: 500, ErrorCode: 10049, Description: "error creating store for stream"}, true},
		{jetstream.ErrJetStreamNotEnabled, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"}, false},
		{context.DeadlineExceeded, true},
		{jetstream.ErrConnectionClosed, false},
		{errors.New("other"), false},
	} {
		if got := settling(c.err); got != c.want {
			t.Errorf("settling(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestCanaryUnderPrefix: the canary's stream and subjects are under the
// prefix, so a NATS user limited to it passes the check.
func TestCanaryUnderPrefix(t *testing.T) {
	stream, subj := canaryNames("acme-bus")
	if !strings.HasPrefix(stream, "ACME_BUS_CANARY_") || !strings.HasPrefix(subj, "acme-bus.canary.") || strings.Count(subj, ".") != 2 {
		t.Errorf("canary names %q, %q", stream, subj)
	}
	conn, _ := storeLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.Check(ctx, "acme-bus"); err != nil {
		t.Fatal(err)
	}
	for name := range conn.JS.StreamNames(ctx).Name() {
		if strings.Contains(name, "CANARY") {
			t.Errorf("canary stream %s left behind", name)
		}
	}
}

// TestAppendOneAnswers: a single append reads every answer the server
// gives — stored, duplicate, wrong last sequence, wrong stream — as it did
// through nats.go's PublishMsg.
func TestAppendOneAnswers(t *testing.T) {
	conn, l := storeLog(t)
	ctx := context.Background()
	seq, err := l.Append(ctx, []*bus.Message{msg("s.a.1", "m1")}, nil)
	if err != nil || seq != 1 {
		t.Fatalf("first append: seq %d, %v", seq, err)
	}
	if seq, err := l.Append(ctx, []*bus.Message{msg("s.a.2", "m2")}, nil); err != nil || seq != 2 {
		t.Fatalf("second append: seq %d, %v", seq, err)
	}
	if seq, err := l.Append(ctx, []*bus.Message{msg("s.a.1", "m1")}, nil); !errors.Is(err, errs.ErrDuplicate) || seq != 1 {
		t.Errorf("same message id again: seq %d, %v; want 1, ErrDuplicate", seq, err)
	}
	_, err = l.Append(ctx, []*bus.Message{msg("s.b.1", "m3")}, &bus.Expect{Subject: "s.a.*", LastSeq: 1})
	if !errors.Is(err, errs.ErrConflict) {
		t.Errorf("stale expectation: %v, want ErrConflict", err)
	}
	if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"o.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, []*bus.Message{msg("o.x", "m4")}, nil); err == nil {
		t.Error("a subject of another stream was stored through this log")
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := l.Append(short, []*bus.Message{msg("nowhere.x", "m5")}, nil); !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("a subject no stream takes: %v, want ErrUnavailable (no responders)", err)
	}
}

// TestRangeOfLargeMessagesIsBounded: a read of messages near the largest
// payload holds about bus.RangeBytes, not max of them, and the server sends
// it in bounded batches: 70 MB asked for at once would pass the server's
// pending limit and cut the connection as a slow consumer.
func TestRangeOfLargeMessagesIsBounded(t *testing.T) {
	conn, l := storeLog(t)
	ctx := context.Background()
	const n, size = 70, 1_000_000
	for i := range n {
		m := msg("s.big", "")
		m.Data = bytes.Repeat([]byte{byte('a' + i%26)}, size)
		if _, err := l.Append(ctx, []*bus.Message{m}, nil); err != nil {
			t.Fatal(err)
		}
	}
	perRead := (bus.RangeBytes + size - 1) / size
	var seen uint64
	for from := uint64(1); seen < n; {
		got, err := l.Range(ctx, "s.>", from, 1000)
		if err != nil {
			t.Fatalf("Range from %d: %v", from, err)
		}
		if want := min(perRead, n-int(seen)); len(got) != want {
			t.Fatalf("Range from %d: %d messages, want %d", from, len(got), want)
		}
		if full := bus.Full(got, 1000); full != (len(got) == perRead) {
			t.Errorf("Range from %d: Full %v with %d messages", from, full, len(got))
		}
		for _, m := range got {
			if seen++; m.Seq != seen || len(m.Data) != size || m.Data[0] != byte('a'+(seen-1)%26) {
				t.Fatalf("message %d: seq %d, %d bytes", seen, m.Seq, len(m.Data))
			}
		}
		from = seen + 1
	}
	if r := conn.NC.Stats().Reconnects; r != 0 {
		t.Errorf("the connection was cut %d times", r)
	}
}

// TestRangeGoesOnAfterAShortBatch: a batch the server ends early with
// matches pending (here its byte limit) is followed by another, so a page is
// never short while matches remain, and nothing is read twice.
func TestRangeGoesOnAfterAShortBatch(t *testing.T) {
	_, l := storeLog(t)
	ctx := context.Background()
	for i := range 25 {
		if _, err := l.Append(ctx, []*bus.Message{msg("s.a."+strconv.Itoa(i%3), "r"+strconv.Itoa(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	l.batchBytes = 100 // a few messages per batch
	for _, c := range []struct {
		filter    string
		from      uint64
		max, want int
	}{
		{"s.>", 1, 20, 20},
		{"s.>", 10, 20, 16},
		{"s.a.1", 1, 5, 5},
		{"s.a.1", 1, 20, 8},
		{"s.a.2", 25, 10, 0},
	} {
		got, err := l.Range(ctx, c.filter, c.from, c.max)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if len(got) != c.want {
			t.Errorf("Range(%s, from %d, max %d): %d messages, want %d", c.filter, c.from, c.max, len(got), c.want)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Seq <= got[i-1].Seq {
				t.Errorf("Range(%s): sequence %d after %d", c.filter, got[i].Seq, got[i-1].Seq)
			}
		}
	}
}

// TestRangeLongerThanOneBatch: a read of more than maxDirectBatch
// messages takes several batches, each within the synchronous
// subscription's buffer, and returns every message once, in order.
func TestRangeLongerThanOneBatch(t *testing.T) {
	_, l := storeLog(t)
	ctx := context.Background()
	n := maxDirectBatch + 300
	msgs := make([]*bus.Message, 0, 100)
	for i := range n {
		msgs = append(msgs, msg("s.b", "r"+strconv.Itoa(i)))
		if len(msgs) == cap(msgs) || i == n-1 {
			if _, err := l.Append(ctx, msgs, nil); err != nil {
				t.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
	got, err := l.Range(ctx, "s.>", 1, n-10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n-10 {
		t.Fatalf("Range: %d messages, want %d", len(got), n-10)
	}
	for i, m := range got {
		if m.Seq != uint64(i+1) {
			t.Fatalf("message %d has sequence %d", i, m.Seq)
		}
	}
}

// rawPublish publishes one message with the header block hdr, exactly as
// given, over the plain NATS protocol (nats.go would sanitise it), and
// waits until the server has processed it.
func rawPublish(t *testing.T, addr, subject, hdr, payload string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"headers\":true,\"protocol\":1}\r\nHPUB %s %d %d\r\n%s%s\r\nPING\r\n",
		subject, len(hdr), len(hdr)+len(payload), hdr, payload)
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("raw publish: %v", err)
		}
		if strings.HasPrefix(line, "-ERR") {
			t.Fatalf("raw publish: %s", line)
		}
		if strings.HasPrefix(line, "PONG") {
			return
		}
	}
}

// TestReadsIgnoreHeadersPosingAsTheServers: messages published straight to
// NATS with headers named like the ones a direct get adds (sequence,
// subject, stream, time, pending count, previous sequence, an end-of-batch
// or other status), some behind a blank line that ends nats.go's reading of
// the header block, are read with the server's values: their own sequence
// and subject, pages neither short nor repeated, nothing unreadable.
func TestReadsIgnoreHeadersPosingAsTheServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, l := storeLog(t)
	addr := strings.TrimPrefix(conn.ClientURL(), "nats://")
	forged := []struct{ hdr, payload string }{
		{"NATS/1.0\r\nNats-Sequence: 1\r\nNats-Num-Pending: 0\r\n\r\n", "x"},
		{"NATS/1.0\r\nNats-Subject: s.fake\r\nNats-Time-Stamp: not a time\r\nNats-Stream: \r\n\r\n", "x"},
		{"NATS/1.0\r\nStatus: 204\r\nDescription: EOB\r\n\r\n", ""},
		// Behind a blank line, nats.go reads none of the server's headers.
		{"NATS/1.0\r\nNats-Stream: S\r\nNats-Sequence: 1\r\nNats-Subject: s.fake\r\nNats-Time-Stamp: 2020-01-01T00:00:00Z\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 0\r\n\r\nX: y\r\n\r\n", "x"},
		{"NATS/1.0\r\nStatus: 204\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 7\r\n\r\nX: y\r\n\r\n", ""},
		{"NATS/1.0\r\nStatus: 503\r\n\r\n", ""},
		// A sequence ahead of its own and a subject outside the filter.
		{"NATS/1.0\r\nNats-Stream: S\r\nNats-Sequence: 100\r\nNats-Subject: s.admin\r\nNats-Time-Stamp: 2020-01-01T00:00:00Z\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 0\r\n\r\nX: y\r\n\r\n", "x"},
	}
	const n = 22
	for i := range n {
		subj := "s.h." + strconv.Itoa(i)
		if i%3 == 2 && i/3 < len(forged) {
			f := forged[i/3]
			rawPublish(t, addr, subj, f.hdr, f.payload)
			continue
		}
		if _, err := conn.JS.Publish(ctx, subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, mb := range []int{0, 60} { // one batch, or a few messages per batch
		l.batchBytes = mb
		for _, max := range []int{5, n, 20} {
			got, err := l.Range(ctx, "s.>", 1, max)
			if err != nil {
				t.Fatalf("Range max %d: %v", max, err)
			}
			if want := min(max, n); len(got) != want {
				t.Errorf("max bytes %d, Range max %d: %d messages, want %d", mb, max, len(got), want)
			}
			for i, m := range got {
				if m.Seq != uint64(i+1) || m.Subject != "s.h."+strconv.Itoa(i) {
					t.Errorf("max bytes %d, Range max %d, message %d: seq %d subject %s", mb, max, i, m.Seq, m.Subject)
				}
			}
		}
		for from := uint64(1); from <= n; from++ {
			// The followers' read, which takes an empty batch at its
			// word, still goes past a batch that stopped at a forgery.
			if got, err := l.read(ctx, "s.>", from, 1, false); err != nil || len(got) != 1 || got[0].Seq != from {
				t.Errorf("max bytes %d, poll from %d: %v, %v", mb, from, got, err)
			}
			for _, filter := range []string{"s.>", "s.h.*", "s.*." + strconv.Itoa(int(from-1))} {
				for _, max := range []int{1, 10} {
					got, err := l.Range(ctx, filter, from, max)
					if err != nil || len(got) == 0 || got[0].Seq != from || got[0].Subject != "s.h."+strconv.Itoa(int(from-1)) {
						t.Errorf("max bytes %d, Range %s from %d max %d: %v, %v", mb, filter, from, max, got, err)
						continue
					}
					for i, m := range got {
						if m.Seq != from+uint64(i) || !strings.HasPrefix(m.Subject, "s.h.") {
							t.Errorf("max bytes %d, Range %s from %d max %d, message %d: seq %d subject %s", mb, filter, from, max, i, m.Seq, m.Subject)
						}
					}
				}
			}
		}
	}
	l.batchBytes = 0
	for seq := uint64(1); seq <= n; seq++ {
		m, err := l.Get(ctx, seq)
		if err != nil || m.Seq != seq || m.Subject != "s.h."+strconv.Itoa(int(seq-1)) {
			t.Errorf("Get(%d): %+v, %v", seq, m, err)
		}
	}
}

// TestRequestHonoursItsContext: request sends nothing once ctx has ended,
// and waits no longer than ctx's deadline when that comes before the try's.
func TestRequestHonoursItsContext(t *testing.T) {
	conn, _ := storeLog(t)
	got := make(chan string, 4)
	sub, err := conn.NC.Subscribe("silent.>", func(m *nats.Msg) { got <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := request(cancelled, conn.NC, &nats.Msg{Subject: "silent.cancelled"}, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v, want context.Canceled", err)
	}

	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = request(short, conn.NC, &nats.Msg{Subject: "silent.short"}, time.Minute)
	if !transient(err) {
		t.Errorf("unanswered request: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("unanswered request waited %s, past its context's deadline", d)
	}
	if err := conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "silent.short" {
		t.Errorf("first request seen: %s, want only silent.short (the cancelled one must not be sent)", s)
	}
	select {
	case s := <-got:
		t.Errorf("a second request was seen: %s", s)
	default:
	}
}

// TestAppendWakesFollowers: an append through a Log wakes that Log's
// Follow loops whose filter takes one of its messages, at once (what this
// process writes reaches its own registries without waiting for the
// poll), and no other; a stopped follower is no longer woken.
func TestAppendWakesFollowers(t *testing.T) {
	_, l := storeLog(t)
	ctx := context.Background()
	f, stop := l.follow("s.b")
	wake := f.wake
	woken := func() bool {
		select {
		case <-wake:
			return true
		default:
			return false
		}
	}
	if _, err := l.Append(ctx, []*bus.Message{msg("s.a", "w-1")}, nil); err != nil {
		t.Fatal(err)
	}
	if woken() {
		t.Error("an append outside the filter woke the follower")
	}
	if _, err := l.Append(ctx, []*bus.Message{msg("s.a", "w-2"), msg("s.b", "w-3")}, nil); err != nil {
		t.Fatal(err)
	}
	if !woken() {
		t.Fatal("a batch append with a message the filter takes did not wake the follower")
	}
	if _, err := l.Append(ctx, []*bus.Message{msg("s.b", "w-4")}, nil); err != nil {
		t.Fatal(err)
	}
	if !woken() {
		t.Fatal("an append the filter takes did not wake the follower")
	}
	stop()
	if fs := l.followers.Load(); fs != nil && len(*fs) != 0 {
		t.Errorf("%d followers left after stop", len(*fs))
	}
	if _, err := l.Append(ctx, []*bus.Message{msg("s.b", "w-5")}, nil); err != nil {
		t.Fatal(err)
	}
	if woken() {
		t.Error("a stopped follower was woken")
	}
}

// TestBatchedReadsShareAnInbox: batched reads one after another on a
// connection subscribe once, not once a read (the server counts each
// subscription made).
func TestBatchedReadsShareAnInbox(t *testing.T) {
	conn, l := storeLog(t)
	ctx := context.Background()
	for i := range 5 {
		if _, err := l.Append(ctx, []*bus.Message{msg("s.a", "r"+strconv.Itoa(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Range(ctx, "s.>", 1, 10); err != nil { // the first read makes the inbox
		t.Fatal(err)
	}
	inserts := func() uint64 {
		sz, err := conn.server.Subsz(nil)
		if err != nil {
			t.Fatal(err)
		}
		return sz.NumInserts
	}
	before := inserts()
	for range 50 {
		if got, err := l.Range(ctx, "s.>", 1, 10); err != nil || len(got) != 5 {
			t.Fatalf("range: %d messages, %v", len(got), err)
		}
	}
	if n := inserts() - before; n > 0 {
		t.Errorf("50 reads made %d subscriptions", n)
	}
}

// TestInboxSkipsAnswersOfEarlierRequests: an inbox reads only the
// answers to its last request, however many of an earlier one arrive
// after; an inbox given back before its request was answered in full is
// not kept, one answered in full is.
func TestInboxSkipsAnswersOfEarlierRequests(t *testing.T) {
	conn, _ := storeLog(t)
	nc := conn.NC
	// Each request is answered three times, with its payload and the
	// answer's number.
	if _, err := nc.Subscribe("answer.thrice", func(m *nats.Msg) {
		for i := range 3 {
			_ = nc.Publish(m.Reply, fmt.Appendf(nil, "%s/%d", m.Data, i))
		}
	}); err != nil {
		t.Fatal(err)
	}
	inboxes := newDirectInboxes()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ask := func(in *directInbox, what string, answers int) {
		t.Helper()
		if err := in.send(nc, "answer.thrice", []byte(what)); err != nil {
			t.Fatal(err)
		}
		for i := range answers {
			m, err := in.next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%s/%d", what, i); string(m.Data) != want {
				t.Errorf("answer %d: %q, want %q", i, m.Data, want)
			}
		}
	}
	in, err := inboxes.take(nc)
	if err != nil {
		t.Fatal(err)
	}
	ask(in, "first", 1) // given up after one answer of three
	ask(in, "second", 3)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	inboxes.give(nc, in, true)
	if again, err := inboxes.take(nc); err != nil || again != in {
		t.Fatalf("an inbox answered in full was not kept (%v)", err)
	}
	ask(in, "third", 1)
	inboxes.give(nc, in, false)
	if in.sub.IsValid() {
		t.Error("an inbox given back before its request was answered in full is still subscribed")
	}
	if again, err := inboxes.take(nc); err != nil || again == in {
		t.Fatalf("an inbox given back unfinished was taken again (%v)", err)
	}
}
