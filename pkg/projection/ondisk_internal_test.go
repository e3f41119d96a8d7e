package projection

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/localstore"
)

// heldDisk is a replica's disk whose writes wait until released, or fail
// while refuse is set.
type heldDisk struct {
	bus.Disk
	mu      sync.Mutex
	hold    chan struct{} // a write waits for it to close; nil: no wait
	entered chan struct{} // told when a write waits
	refuse  bool
	// getHold holds a read before the disk is read, getHoldAfter after
	// it (its answer kept until released); getEntered is told when a read
	// waits.
	getHold, getHoldAfter, getEntered chan struct{}
}

func (d *heldDisk) Get(key []byte) ([]byte, bool, error) {
	d.mu.Lock()
	before, after, entered := d.getHold, d.getHoldAfter, d.getEntered
	d.mu.Unlock()
	waitOn(before, entered)
	val, ok, err := d.Disk.Get(key)
	waitOn(after, entered)
	return val, ok, err
}

// waitOn tells entered and waits until hold is closed, unless hold is nil.
func waitOn(hold, entered chan struct{}) {
	if hold != nil {
		entered <- struct{}{}
		<-hold
	}
}

// holdReads makes the next reads of d wait, before the disk is read or,
// with after, once it answered, until the returned release is called;
// entered is told when one waits.
func (d *heldDisk) holdReads(after bool) (entered chan struct{}, release func()) {
	hold, entered := make(chan struct{}), make(chan struct{})
	d.mu.Lock()
	if after {
		d.getHold, d.getHoldAfter = nil, hold
	} else {
		d.getHold, d.getHoldAfter = hold, nil
	}
	d.getEntered = entered
	d.mu.Unlock()
	return entered, func() {
		d.mu.Lock()
		d.getHold, d.getHoldAfter = nil, nil
		d.mu.Unlock()
		close(hold)
	}
}

func (d *heldDisk) Write(w []bus.DiskWrite) error {
	d.mu.Lock()
	hold, entered, refuse := d.hold, d.entered, d.refuse
	d.mu.Unlock()
	waitOn(hold, entered)
	if refuse {
		return errors.New("refused")
	}
	return d.Disk.Write(w)
}

func openModel(t *testing.T) (*diskModel, *heldDisk) {
	t.Helper()
	store, _, err := localstore.Open(t.TempDir(), localstore.MinMemory, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	disk := &heldDisk{Disk: store}
	m := newDiskModel(disk, "test model", slog.New(slog.DiscardHandler))
	if _, err := m.load(); err != nil {
		t.Fatal(err)
	}
	return m, disk
}

func TestModelAnswersWhileItsBatchIsWritten(t *testing.T) {
	m, disk := openModel(t)
	ctx := context.Background()
	m.put(ctx, 1, bus.DiskWrite{Key: []byte("a"), Val: []byte("1")})
	disk.hold, disk.entered = make(chan struct{}), make(chan struct{})
	flushed := make(chan error, 1)
	go func() { flushed <- m.flush() }()
	<-disk.entered // the batch holding a is being written

	got := make(chan []byte, 1)
	go func() {
		m.put(ctx, 2, bus.DiskWrite{Key: []byte("b"), Val: []byte("2")})
		val, _, _ := m.get([]byte("a"))
		got <- val
	}()
	select {
	case val := <-got:
		if string(val) != "1" {
			t.Fatalf("a read %q while its batch was written", val)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a put and a read waited for the write to the disk")
	}
	if b, ok, _ := m.get([]byte("b")); !ok || string(b) != "2" {
		t.Fatalf("b, put after the batch left: %q %v", b, ok)
	}
	close(disk.hold)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if m.through.Load() != 1 {
		t.Fatalf("the disk holds the model through %d, not 1", m.through.Load())
	}
	disk.hold = nil
	if err := m.flush(); err != nil || m.through.Load() != 2 {
		t.Fatalf("the second batch: %v, through %d", err, m.through.Load())
	}
	for key, want := range map[string]string{"a": "1", "b": "2"} {
		if val, ok, err := m.disk.Get([]byte(key)); err != nil || !ok || string(val) != want {
			t.Fatalf("%s on disk: %q %v %v", key, val, ok, err)
		}
	}
}

func TestModelKeepsARefusedBatch(t *testing.T) {
	m, disk := openModel(t)
	ctx := context.Background()
	m.put(ctx, 1, bus.DiskWrite{Key: []byte("a"), Val: []byte("old")}, bus.DiskWrite{Key: []byte("b"), Val: []byte("1")})
	disk.hold, disk.entered, disk.refuse = make(chan struct{}), make(chan struct{}), true
	flushed := make(chan error, 1)
	go func() { flushed <- m.flush() }()
	<-disk.entered
	m.put(ctx, 2, bus.DiskWrite{Key: []byte("a"), Val: []byte("new")}) // newer than the batch in flight
	close(disk.hold)
	if err := <-flushed; err == nil {
		t.Fatal("a refused write flushed")
	}
	if m.through.Load() != 0 {
		t.Fatalf("through %d after a refused write", m.through.Load())
	}
	for key, want := range map[string]string{"a": "new", "b": "1"} {
		if val, ok, _ := m.get([]byte(key)); !ok || string(val) != want {
			t.Fatalf("%s after a refused write: %q %v", key, val, ok)
		}
	}
	disk.hold, disk.refuse = nil, false
	if err := m.flush(); err != nil || m.through.Load() != 2 {
		t.Fatalf("the write once taken: %v, through %d", err, m.through.Load())
	}
	for key, want := range map[string]string{"a": "new", "b": "1"} {
		if val, ok, err := m.disk.Get([]byte(key)); err != nil || !ok || string(val) != want {
			t.Fatalf("%s on disk: %q %v %v (the batch put back after what came since?)", key, val, ok, err)
		}
	}
}

// TestModelKnowsAKeyAbsentUntilItIsPut: a key getNoting found absent is
// known absent once; a key put while getNoting read the disk for it, or
// found in memory, is not.
func TestModelKnowsAKeyAbsentUntilItIsPut(t *testing.T) {
	m, disk := openModel(t)
	ctx := context.Background()
	if _, found, err := m.getNoting([]byte("a")); found || err != nil {
		t.Fatalf("an empty disk holds a: %v, %v", found, err)
	}
	if !m.knownAbsent([]byte("a")) {
		t.Error("a key found absent is not known absent")
	}
	if m.knownAbsent([]byte("a")) {
		t.Error("a key is known absent twice")
	}

	// look starts getNoting(key), held by the disk before its read or
	// after it, and returns once it waits.
	look := func(key string, after bool) (found chan bool, release func()) {
		entered, release := disk.holdReads(after)
		found = make(chan bool, 1)
		go func() {
			_, ok, _ := m.getNoting([]byte(key))
			found <- ok
		}()
		<-entered
		return found, release
	}

	read, release := look("b", false)
	m.put(ctx, 1, bus.DiskWrite{Key: []byte("b"), Val: []byte("1")})
	release()
	if found := <-read; found {
		t.Fatal("the disk holds b before the batch is written")
	}
	if m.knownAbsent([]byte("b")) {
		t.Error("a key put while getNoting read the disk for it is known absent")
	}

	// A look that read the disk before a write reached it answers while
	// another look, begun once the write was on the disk, reads it.
	read, release = look("c", true)
	m.put(ctx, 2, bus.DiskWrite{Key: []byte("c"), Val: []byte("2")})
	if err := m.flush(); err != nil {
		t.Fatal(err)
	}
	readSecond, releaseSecond := look("c", false)
	release()
	if found := <-read; found {
		t.Fatal("the first look found c, read before it was written")
	}
	if m.knownAbsent([]byte("c")) {
		t.Error("a key on the disk is known absent: a look that read before the write marked it after another look began")
	}
	releaseSecond()
	if found := <-readSecond; !found {
		t.Error("c written to the disk not found")
	}
	if m.knownAbsent([]byte("c")) {
		t.Error("a key found on the disk is known absent")
	}

	if val, found, err := m.getNoting([]byte("b")); !found || err != nil || string(val) != "1" {
		t.Fatalf("getNoting(b) = %q, %v, %v; want the value put", val, found, err)
	}
	if m.knownAbsent([]byte("b")) {
		t.Error("a key found in memory is known absent")
	}

	for i := range maxAbsent + 1 {
		if _, _, err := m.getNoting([]byte{'k', byte(i >> 8), byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.absent); n > maxAbsent {
		t.Errorf("%d keys known absent, more than %d", n, maxAbsent)
	}
}
