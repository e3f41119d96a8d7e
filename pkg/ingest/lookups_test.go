package ingest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
)

// countingKV counts the reads of a real bucket; hold, when set, runs in
// the first Get before it reads (the leader's read, in flight while hold
// runs; later Gets do not wait for it).
type countingKV struct {
	bus.IndexKV
	gets, founds atomic.Int64
	hold         func()
}

func (k *countingKV) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	if k.gets.Add(1) == 1 && k.hold != nil {
		k.hold()
	}
	return k.IndexKV.Get(ctx, key)
}

func (k *countingKV) Found(ctx context.Context, keys []string) (string, error) {
	k.founds.Add(1)
	return k.IndexKV.Found(ctx, keys)
}

func lookupsKV(t *testing.T) *countingKV {
	t.Helper()
	return &countingKV{IndexKV: natsjstest.KV(t, "R")}
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

// until polls cond for up to 10 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 10 s", what)
		}
	}
}

// queued reports whether n lookups wait in l's queue.
func queued(l *lookups, n int) func() bool {
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.queue) >= n
	}
}

// inGroups asks l about every key while a leader's lookup is in flight, so
// that they all queue behind it, and returns the answers.
func inGroups(t *testing.T, kv *countingKV, l *lookups, keys []string) []bool {
	t.Helper()
	release := make(chan struct{})
	kv.hold = func() { <-release }
	leader := make(chan error, 1)
	go func() { _, err := l.exists(t.Context(), "default.leader"); leader <- err }()
	until(t, "the leader's read in flight", func() bool { return kv.gets.Load() == 1 })
	go func() {
		until(t, fmt.Sprintf("%d queued", len(keys)), queued(l, len(keys)))
		close(release)
	}()
	found := existsAll(t, l, keys)
	if err := <-leader; err != nil {
		t.Errorf("leader: %v", err)
	}
	return found
}

func keysOf(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("default.%s%d", prefix, i)
	}
	return keys
}

// TestLookupsGroupWhileOneIsInFlight: lookups that arrive while one is in
// flight are answered by one Found per group of bus.MaxGroupKeys, and the
// lookups end idle.
func TestLookupsGroupWhileOneIsInFlight(t *testing.T) {
	kv := lookupsKV(t)
	l := &lookups{kv: kv}
	const n = 400
	keys := keysOf("new", n)
	for i, found := range inGroups(t, kv, l, keys) {
		if found {
			t.Errorf("%s: found, never written", keys[i])
		}
	}
	if g, f := kv.gets.Load(), kv.founds.Load(); g != 1 || f != 2 {
		t.Errorf("%d lookups behind one took %d Gets and %d Founds, want the leader's Get and 2 Founds (groups of %d and %d)", n, g, f, bus.MaxGroupKeys, n-bus.MaxGroupKeys)
	}
	until(t, "idle", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return !l.running && len(l.queue) == 0
	})
}

// TestLookupsAResubmissionInAGroup: a group with one existing key costs one
// Found more, and a Get for that key only.
func TestLookupsAResubmissionInAGroup(t *testing.T) {
	kv := lookupsKV(t)
	l := &lookups{kv: kv}
	const n = 100
	keys := keysOf("k", n)
	if _, err := kv.Create(t.Context(), keys[57], []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for i, found := range inGroups(t, kv, l, keys) {
		if found != (i == 57) {
			t.Errorf("%s: found %v", keys[i], found)
		}
	}
	if g, f := kv.gets.Load(), kv.founds.Load(); g != 2 || f != 2 {
		t.Errorf("%d lookups with one resubmission took %d Gets and %d Founds, want 2 of each (the leader's and the resubmission's Gets)", n, g, f)
	}
}

// TestLookupsFindEveryExistingKey: groups with many existing keys fall
// back to a Get per key after maxFound reads, and none is missed.
func TestLookupsFindEveryExistingKey(t *testing.T) {
	kv := lookupsKV(t)
	l := &lookups{kv: kv}
	const n = 300
	keys := keysOf("c", n)
	for i, key := range keys {
		if i%7 == 3 {
			if _, err := kv.Create(t.Context(), key, []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := kv.Delete(t.Context(), keys[10]); err != nil { // a delete marker: not found
		t.Fatal(err)
	}
	for i, found := range inGroups(t, kv, l, keys) {
		if want := i%7 == 3 && i != 10; found != want {
			t.Errorf("%s: found %v, want %v", keys[i], found, want)
		}
	}
	if f := kv.founds.Load(); f > 2*maxFound {
		t.Errorf("%d Founds for two groups, want at most %d", f, 2*maxFound)
	}
}

// TestLookupWaiterLeavesWithItsContext: a queued lookup whose context ends
// returns at once; the group goes on without it.
func TestLookupWaiterLeavesWithItsContext(t *testing.T) {
	kv := lookupsKV(t)
	l := &lookups{kv: kv}
	release := make(chan struct{})
	kv.hold = func() { <-release }
	first := make(chan error, 1)
	go func() { _, err := l.exists(t.Context(), "default.first"); first <- err }()
	until(t, "the first lookup in flight", func() bool { return kv.gets.Load() == 1 })
	ctx, cancel := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	go func() { _, err := l.exists(ctx, "default.gone"); gone <- err }()
	other := make(chan error, 1)
	go func() { _, err := l.exists(t.Context(), "default.other"); other <- err }()
	until(t, "two queued", queued(l, 2))
	cancel()
	select {
	case err := <-gone:
		if err == nil {
			t.Error("a lookup whose context ended: no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a lookup whose context ended is still waiting")
	}
	close(release)
	for what, ch := range map[string]chan error{"first": first, "other": other} {
		if err := <-ch; err != nil {
			t.Errorf("%s lookup: %v", what, err)
		}
	}
	if f := kv.founds.Load(); f != 1 {
		t.Errorf("%d Founds, want the group's one", f)
	}
}

// TestLookupWaitIsBounded: a queued lookup stops waiting for its group
// after l.wait and reads its key itself, while the first lookup's read
// hangs.
func TestLookupWaitIsBounded(t *testing.T) {
	kv := lookupsKV(t)
	if _, err := kv.Create(t.Context(), "default.there", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	l := &lookups{kv: kv, wait: 50 * time.Millisecond}
	release := make(chan struct{})
	defer close(release)
	kv.hold = func() { <-release }
	go func() { _, _ = l.exists(t.Context(), "default.first") }()
	until(t, "the first lookup in flight", func() bool { return kv.gets.Load() == 1 })
	type answer struct {
		found bool
		err   error
	}
	queuedAnswer := make(chan answer, 1)
	go func() {
		found, err := l.exists(t.Context(), "default.there")
		queuedAnswer <- answer{found, err}
	}()
	select {
	case a := <-queuedAnswer:
		if !a.found || a.err != nil {
			t.Errorf("queued lookup: found %v, err %v", a.found, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a queued lookup still waits behind a read that hangs")
	}
}
