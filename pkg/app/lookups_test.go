package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/nats-io/nats.go/jetstream"
)

// countingKV counts the reads of a real bucket; hold, when set, keeps the
// first Get from answering until it returns.
type countingKV struct {
	bus.IndexKV
	gets, absents atomic.Int64
	hold          func()
	held          sync.Once
}

func (k *countingKV) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	k.gets.Add(1)
	if k.hold != nil {
		k.held.Do(k.hold)
	}
	return k.IndexKV.Get(ctx, key)
}

func (k *countingKV) Absent(ctx context.Context, keys []string) bool {
	k.absents.Add(1)
	return k.IndexKV.Absent(ctx, keys)
}

func lookupsKV(t *testing.T) bus.IndexKV {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := natsjs.Connect(ctx, natsjs.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if _, err := conn.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "R", History: 1}); err != nil {
		t.Fatal(err)
	}
	kv, err := conn.KV(ctx, "R")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// existsAll asks l about every key at once and returns the answers.
func existsAll(t *testing.T, l *lookups, keys []string) []bool {
	t.Helper()
	found := make([]bool, len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() {
			var err error
			if found[i], err = l.exists(t.Context(), key); err != nil {
				t.Errorf("exists %s: %v", key, err)
			}
		})
	}
	wg.Wait()
	return found
}

// queued waits until n lookups wait in l's queue.
func queued(l *lookups, n int) {
	for {
		l.mu.Lock()
		q := len(l.queue)
		l.mu.Unlock()
		if q >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLookupsGroupWhileOneIsInFlight: lookups that arrive while one is in
// flight are answered by one Absent per group of bus.MaxAbsentKeys.
func TestLookupsGroupWhileOneIsInFlight(t *testing.T) {
	kv := &countingKV{IndexKV: lookupsKV(t)}
	l := &lookups{kv: kv}
	const n = 400
	kv.hold = func() { queued(l, n-1) } // the first lookup's Get, in flight until all others queue
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("default.new%d", i)
	}
	for i, found := range existsAll(t, l, keys) {
		if found {
			t.Errorf("%s: found, never written", keys[i])
		}
	}
	if g, a := kv.gets.Load(), kv.absents.Load(); g != 1 || a != 2 {
		t.Errorf("%d lookups took %d Gets and %d Absents, want 1 Get and 2 Absents (groups of %d and %d)", n, g, a, bus.MaxAbsentKeys, n-1-bus.MaxAbsentKeys)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		running, q := l.running, len(l.queue)
		l.mu.Unlock()
		if !running && q == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the last lookup: running %v, %d queued", running, q)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLookupsFindEveryExistingKey: a group with existing keys in it falls
// back to a Get per key, so none is missed.
func TestLookupsFindEveryExistingKey(t *testing.T) {
	kv := &countingKV{IndexKV: lookupsKV(t)}
	l := &lookups{kv: kv}
	const n = 300
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("default.c%d", i)
		if i%7 == 3 {
			if _, err := kv.Create(t.Context(), keys[i], []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
	}
	kv.hold = func() { queued(l, n-1) }
	for i, found := range existsAll(t, l, keys) {
		if want := i%7 == 3; found != want {
			t.Errorf("%s: found %v, want %v", keys[i], found, want)
		}
	}
	if a := kv.absents.Load(); a != 2 {
		t.Errorf("%d Absents, want 2 (groups of %d and %d)", a, bus.MaxAbsentKeys, n-1-bus.MaxAbsentKeys)
	}
}

// TestLookupWaiterLeavesWithItsContext: a queued lookup whose context ends
// returns at once; the group goes on without it.
func TestLookupWaiterLeavesWithItsContext(t *testing.T) {
	kv := &countingKV{IndexKV: lookupsKV(t)}
	l := &lookups{kv: kv}
	release := make(chan struct{})
	kv.hold = func() { <-release }
	first := make(chan error, 1)
	go func() { _, err := l.exists(t.Context(), "default.first"); first <- err }()
	for kv.gets.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := l.exists(ctx, "default.gone"); err == nil {
		t.Error("a lookup whose context ended: no error")
	}
	close(release)
	if err := <-first; err != nil {
		t.Errorf("first lookup: %v", err)
	}
	if found, err := l.exists(t.Context(), "default.later"); found || err != nil {
		t.Errorf("a later lookup: %v %v", found, err)
	}
}
