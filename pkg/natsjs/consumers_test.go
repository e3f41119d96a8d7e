package natsjs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// testConn is an embedded in-process nats-server with one limits stream
// "T" on "t.>".
func testConn(t *testing.T) (*natsjs.Conn, *natsjs.Log) {
	t.Helper()
	conn := natsjstest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	log, err := conn.Log(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	return conn, log
}

func appendN(t *testing.T, l *natsjs.Log, subject string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := l.Append(context.Background(), []*bus.Message{{Subject: subject, Header: bus.Header{}, Data: []byte("x")}}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConsumersLifecycle(t *testing.T) {
	conn, l := testConn(t)
	ctx := context.Background()
	admin := conn.Consumers("T")
	appendN(t, l, "t.a", 2) // seqs 1, 2: before the consumer's start

	if _, err := admin.Consumer(ctx, "c1"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("missing consumer: %v", err)
	}
	if err := admin.DeleteConsumer(ctx, "c1"); err != nil {
		t.Fatalf("deleting a missing consumer: %v", err)
	}
	spec := bus.ConsumerSpec{Name: "c1", Filters: []string{"t.a", "t.b"}, StartSeq: 3, Paused: true,
		Metadata: map[string]string{"k": "1"}}
	if err := admin.PutConsumer(ctx, spec); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, "t.a", 1) // seq 3
	appendN(t, l, "t.c", 1) // seq 4, not in the filter
	appendN(t, l, "t.b", 1) // seq 5
	// The server counts pending messages a moment after it acknowledged
	// the appends: wait for the count, then check everything.
	var st *bus.ConsumerState
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if st, err = admin.Consumer(ctx, "c1"); err != nil {
			t.Fatal(err)
		}
		if st.NumPending == 2 || time.Now().After(deadline) {
			break
		}
	}
	if !st.Paused || st.NumPending != 2 || st.Metadata["k"] != "1" || len(st.Metadata) != 1 || fmt.Sprint(st.Filters) != "[t.a t.b]" {
		t.Fatalf("created paused: %+v", st)
	}

	var mu sync.Mutex
	var got []uint64
	cons, err := conn.JS.Consumer(ctx, "T", "c1")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, _ := m.Metadata()
		mu.Lock()
		got = append(got, md.Sequence.Stream)
		mu.Unlock()
		_ = m.Ack()
	}, jetstream.PullExpiry(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	if len(got) != 0 {
		t.Fatalf("paused consumer delivered %v", got)
	}
	mu.Unlock()

	// Putting it again resumes it in place: position and start kept, new
	// metadata, and the waiting pull request is served at once.
	spec.Paused, spec.StartSeq, spec.Metadata = false, 1, map[string]string{"k": "2"}
	if err := admin.PutConsumer(ctx, spec); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resumed consumer delivered %v within 2s", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fmt.Sprint(got) != "[3 5]" {
		t.Fatalf("delivered %v, want [3 5]", got)
	}
	st, _ = admin.Consumer(ctx, "c1")
	if st.Paused || st.Metadata["k"] != "2" || st.Delivered != 5 {
		t.Fatalf("after resume: %+v", st)
	}
	// Idempotent: the same spec again changes nothing.
	if err := admin.PutConsumer(ctx, spec); err != nil {
		t.Fatal(err)
	}
	spec.Paused = true
	if err := admin.PutConsumer(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := admin.PutConsumer(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if st, _ := admin.Consumer(ctx, "c1"); !st.Paused {
		t.Fatal("not paused")
	}
	if err := admin.DeleteConsumer(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Consumer(ctx, "c1"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("deleted consumer: %v", err)
	}
}

func TestFollowReadsInOrderFromASequence(t *testing.T) {
	_, l := testConn(t)
	appendN(t, l, "t.a", 3)
	appendN(t, l, "t.b", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan uint64, 100)
	l.Follow(ctx, "t.a", 2, func(m *bus.Message) { ch <- m.Seq })
	appendN(t, l, "t.a", 1) // seq 5
	var got []uint64
	for len(got) < 3 {
		select {
		case s := <-ch:
			got = append(got, s)
		case <-time.After(5 * time.Second):
			t.Fatalf("followed %v", got)
		}
	}
	if fmt.Sprint(got) != "[2 3 5]" {
		t.Fatalf("followed %v, want [2 3 5]", got)
	}
}

// TestDeliverySettlement: a nak redelivers, a delivery is settled once (an
// ack or a term after an ack is refused), and a term stops the deliveries
// with its reason in the server's advisory.
func TestDeliverySettlement(t *testing.T) {
	conn, l := testConn(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := conn.JS.CreateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	terminated := make(chan string, 1)
	sub, err := conn.NC.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.T.c", func(m *nats.Msg) {
		var adv struct {
			Seq    uint64 `json:"stream_seq"`
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(m.Data, &adv); err == nil {
			terminated <- fmt.Sprintf("%d %s", adv.Seq, adv.Reason)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	appendN(t, l, "t.a", 1) // seq 1: nak, then ack twice
	appendN(t, l, "t.b", 1) // seq 2: term

	type seen struct {
		seq, n          uint64
		secondAck, term error
	}
	got := make(chan seen, 10)
	done := make(chan error, 1)
	go func() {
		done <- conn.Consume(ctx, "T", "c", natsjs.ConsumeOptions{}, func(ctx context.Context, d bus.Delivery) {
			s := seen{seq: d.Message().Seq, n: d.NumDelivered()}
			switch {
			case s.seq == 1 && s.n == 1:
				_ = d.Nak(0)
			case s.seq == 1:
				_ = d.Ack(ctx)
				s.secondAck = d.Ack(ctx)
				s.term = d.Term("too late")
			default:
				_ = d.Term("no good")
			}
			got <- s
		})
	}()
	var deliveries []string
	var second, term error
	for len(deliveries) < 3 {
		select {
		case s := <-got:
			deliveries = append(deliveries, fmt.Sprintf("%d#%d", s.seq, s.n))
			if s.seq == 1 && s.n == 2 {
				second, term = s.secondAck, s.term
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("deliveries %v", deliveries)
		}
	}
	sort.Strings(deliveries)
	if fmt.Sprint(deliveries) != "[1#1 1#2 2#1]" {
		t.Fatalf("deliveries %v, want [1#1 1#2 2#1]", deliveries)
	}
	if second == nil || term == nil {
		t.Fatalf("settling an acknowledged delivery again was not refused: ack %v, term %v", second, term)
	}
	select {
	case adv := <-terminated:
		if adv != "2 no good" {
			t.Fatalf("termination advisory %q, want %q", adv, "2 no good")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no termination advisory")
	}
	// Nothing more: both messages are settled for good.
	select {
	case s := <-got:
		t.Fatalf("delivered again after settling: %+v", s)
	case <-time.After(300 * time.Millisecond):
	}
	st, err := conn.Consumers("T").Consumer(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if st.AckFloor != 2 {
		t.Fatalf("ack floor %d, want 2", st.AckFloor)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
