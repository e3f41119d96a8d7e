package natsjs

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/nats-io/nats.go/jetstream"
)

// consumeKeyed runs Consume on a fresh embedded server's stream P (subjects
// p.>) keyed by subject, publishes each subject of subjects in turn, and
// calls handle with each delivery (acked after).
func consumeKeyed(t *testing.T, workers int, subjects []string, handle func(subject, data string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := streamP(ctx, t)
	if _, err := conn.JS.CreateConsumer(ctx, "P", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for i, s := range subjects {
		if _, err := conn.JS.Publish(ctx, s, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	wg.Add(len(subjects))
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- conn.Consume(cctx, "P", "c", ConsumeOptions{Workers: workers}, func(ctx context.Context, d bus.Delivery) {
			handle(d.Message().Subject, string(d.Message().Data))
			_ = d.Ack(ctx)
			wg.Done()
		})
	}()
	wg.Wait()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestConsumeKeepsEachKeysOrder: the deliveries of one key are handled one
// at a time, in the stream's order, while other keys go on beside them.
func TestConsumeKeepsEachKeysOrder(t *testing.T) {
	var subjects []string
	for i := range 300 {
		subjects = append(subjects, fmt.Sprintf("p.k%d", i%5))
	}
	var mu sync.Mutex
	inHand := map[string]int{}
	last := map[string]int{}
	var faults []string
	consumeKeyed(t, 4, subjects, func(subject, data string) {
		var n int
		fmt.Sscan(data, &n)
		mu.Lock()
		inHand[subject]++
		if inHand[subject] > 1 {
			faults = append(faults, subject+": two deliveries at once")
		}
		if prev, ok := last[subject]; ok && n < prev {
			faults = append(faults, fmt.Sprintf("%s: %d after %d", subject, n, prev))
		}
		last[subject] = n
		mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		mu.Lock()
		inHand[subject]--
		mu.Unlock()
	})
	if len(faults) > 0 {
		t.Fatalf("%d faults, first %v", len(faults), faults[:min(5, len(faults))])
	}
}

// TestConsumeSpreadsKeysOverEveryWorker: as many keys as workers, each
// with a delivery waiting, are handled all at once, even keys a hash of
// the key would have given the same worker (each handler here waits until
// every one is in hand).
func TestConsumeSpreadsKeysOverEveryWorker(t *testing.T) {
	const workers = 4
	var subjects []string
	for i := 0; len(subjects) < workers; i++ {
		s := fmt.Sprintf("p.k%d", i)
		h := fnv.New32a()
		h.Write([]byte(s))
		if h.Sum32()%workers == 0 {
			subjects = append(subjects, s)
		}
	}
	var mu sync.Mutex
	inHand := 0
	all := make(chan struct{})
	apart := 0
	consumeKeyed(t, workers, subjects, func(subject, data string) {
		mu.Lock()
		if inHand++; inHand == workers {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			mu.Lock()
			apart++
			mu.Unlock()
		}
	})
	if apart > 0 {
		t.Fatalf("%d of %d keys' deliveries waited for another key's: they were not all in hand at once", apart, workers)
	}
}
