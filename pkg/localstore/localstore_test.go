package localstore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/localstore"
)

var quiet = slog.New(slog.DiscardHandler)

func open(t *testing.T, dir string) (*localstore.Store, bool) {
	t.Helper()
	s, rebuilt, err := localstore.Open(dir, localstore.MinMemory, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, rebuilt
}

func TestWriteGetScanAcrossAReopen(t *testing.T) {
	dir := t.TempDir()
	s, rebuilt := open(t, dir)
	if rebuilt {
		t.Fatal("a new store reported rebuilt")
	}
	if err := s.Write([]bus.DiskWrite{{Key: []byte("a1"), Val: []byte("x")}, {Key: []byte("a2"), Val: []byte("y")},
		{Key: []byte("b1"), Val: []byte("z")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Write([]bus.DiskWrite{{Key: []byte("a2"), Delete: true}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get([]byte("a1")); !errors.Is(err, localstore.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	s, _ = open(t, dir)
	if v, ok, err := s.Get([]byte("a1")); err != nil || !ok || string(v) != "x" {
		t.Fatalf("a1 = %q %v %v", v, ok, err)
	}
	if _, ok, err := s.Get([]byte("a2")); err != nil || ok {
		t.Fatalf("deleted a2: %v %v", ok, err)
	}
	var keys []string
	if err := s.Scan([]byte("a"), []byte("b"), func(k, _ []byte) bool { keys = append(keys, string(k)); return true }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "a1" {
		t.Fatalf("scan [a, b) = %v", keys)
	}
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get([]byte("b1")); ok || err != nil {
		t.Fatalf("b1 after Reset: %v %v; want absent", ok, err)
	}
}

func TestOpenRefusesADirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	if err := s.Write([]bus.DiskWrite{{Key: []byte("k"), Val: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := localstore.Open(dir, localstore.MinMemory, quiet); !errors.Is(err, localstore.ErrInUse) {
		t.Fatalf("second Open: %v; want ErrInUse", err)
	}
	if _, ok, _ := s.Get([]byte("k")); !ok {
		t.Fatal("the store in use lost its key")
	}
}

func TestOpenEmptiesADamagedStore(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	if err := s.Write([]bus.DiskWrite{{Key: []byte("k"), Val: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	manifests, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatal("no manifest")
	}
	for _, m := range manifests {
		if err := os.WriteFile(m, []byte("not a manifest"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, rebuilt := open(t, dir)
	if !rebuilt {
		t.Fatal("a damaged store opened without being rebuilt")
	}
	if _, ok, err := s.Get([]byte("k")); ok || err != nil {
		t.Fatalf("the emptied store holds k: %v %v", ok, err)
	}
}

// TestLookupsChangeAcrossReopens: a store's tables written with Bloom
// filters (MostlyAbsent) are read by the same store opened for Held
// lookups, which writes tables without, and the other way round; each
// answers every key it holds and none it does not, from its tables (Close
// flushes), after Reset as before.
func TestLookupsChangeAcrossReopens(t *testing.T) {
	dir := t.TempDir()
	write := func(s *localstore.Store, prefix string) {
		t.Helper()
		var w []bus.DiskWrite
		for i := range 500 {
			w = append(w, bus.DiskWrite{Key: fmt.Appendf(nil, "%s%04d", prefix, i), Val: fmt.Appendf(nil, "v%d", i)})
		}
		if err := s.Write(w); err != nil {
			t.Fatal(err)
		}
	}
	check := func(s *localstore.Store, prefixes ...string) {
		t.Helper()
		for _, p := range prefixes {
			for _, i := range []int{0, 1, 250, 499} {
				v, ok, err := s.Get(fmt.Appendf(nil, "%s%04d", p, i))
				if err != nil || !ok || string(v) != fmt.Sprintf("v%d", i) {
					t.Fatalf("%s%04d = %q %v %v", p, i, v, ok, err)
				}
			}
			if _, ok, err := s.Get(fmt.Appendf(nil, "%s%04d", p, 500)); err != nil || ok {
				t.Fatalf("%s0500, never written: found %v, err %v", p, ok, err)
			}
		}
	}
	reopen := func(lookups localstore.Lookups) *localstore.Store {
		t.Helper()
		s, _, err := localstore.OpenFor(dir, localstore.MinMemory, lookups, nil, quiet)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := reopen(localstore.MostlyAbsent)
	write(s, "a")
	s.Close()
	s = reopen(localstore.Held)
	check(s, "a")
	write(s, "b")
	s.Close()
	s = reopen(localstore.MostlyAbsent)
	check(s, "a", "b")
	s.Close()
	s = reopen(localstore.Held)
	defer s.Close()
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get([]byte("a0000")); err != nil || ok {
		t.Fatalf("a0000 after Reset: found %v, err %v", ok, err)
	}
	write(s, "c")
	check(s, "c")
}

// A Held store's keys come in order, so no flushed table overlaps
// another: they are compacted together all the same, into a few large
// tables, not left as one small table per flush.
func TestHeldTablesAreMerged(t *testing.T) {
	dir := t.TempDir()
	s, _, err := localstore.OpenFor(dir, localstore.MinMemory, localstore.Held, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// 48 MiB of values that do not compress, in order: about sixteen
	// flushes of the 3-MiB memtables.
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 1024)
	const n = 48 << 10
	for i := 0; i < n; i += 256 {
		w := make([]bus.DiskWrite, 0, 256)
		for j := i; j < i+256; j++ {
			for k := range val {
				val[k] = byte(rng.Uint32())
			}
			w = append(w, bus.DiskWrite{Key: binary.BigEndian.AppendUint64(nil, uint64(j)), Val: bytes.Clone(val)})
		}
		if err := s.Write(w); err != nil {
			t.Fatal(err)
		}
	}
	// Compactions run in the background: wait for them to leave fewer
	// tables than flushes, up to a minute.
	tables := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
		return len(m)
	}
	deadline := time.Now().Add(time.Minute)
	for tables() > 4 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := tables(); got > 4 {
		t.Fatalf("%d tables for 48 MiB written in order; want them merged into at most 4", got)
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		v, ok, err := s.Get(binary.BigEndian.AppendUint64(nil, uint64(i)))
		if err != nil || !ok || len(v) != len(val) {
			t.Fatalf("key %d: %d bytes, found %v, err %v", i, len(v), ok, err)
		}
	}
}

// A store that opens reads each table once: the first Get of a key in a
// block it read then reads nothing from its tables (their indexes and
// filters are cached), while a Get in a block not read does.
func TestOpenReadsEachTableOnce(t *testing.T) {
	for _, lookups := range []localstore.Lookups{localstore.MostlyAbsent, localstore.Held} {
		dir := t.TempDir()
		// Three tables, one a reopen: 2,000 keys of 100 random bytes each,
		// about fifty blocks.
		rng := rand.New(rand.NewPCG(1, 2))
		for _, table := range []string{"a", "b", "c"} {
			s, _, err := localstore.OpenFor(dir, localstore.MinMemory, lookups, nil, quiet)
			if err != nil {
				t.Fatal(err)
			}
			var w []bus.DiskWrite
			for i := range 2000 {
				val := make([]byte, 100)
				for k := range val {
					val[k] = byte(rng.Uint32())
				}
				w = append(w, bus.DiskWrite{Key: fmt.Appendf(nil, "%s%04d", table, i), Val: val})
			}
			if err := s.Write(w); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "*.sst")); len(m) != 3 {
			t.Fatalf("lookups %d: %d tables, want 3", lookups, len(m))
		}
		s, _, err := localstore.OpenFor(dir, localstore.MinMemory, lookups, nil, quiet)
		if err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{"a", "b", "c"} {
			first, err := localstore.DiskBytesOfGet(s, []byte(table+"0000"))
			if err != nil {
				t.Fatal(err)
			}
			last, err := localstore.DiskBytesOfGet(s, []byte(table+"1999"))
			if err != nil {
				t.Fatal(err)
			}
			if first != 0 || last == 0 {
				t.Errorf("lookups %d, table %s: a Get of its first key read %d bytes from the table, of its last %d; want 0 and more than 0",
					lookups, table, first, last)
			}
		}
		s.Close()
	}
}

// The keys a store's Scanned says are read by Scan alone are left out of
// its Bloom filters; Scan still finds them, Get refuses them, and Get
// still finds and misses the others.
func TestScannedKeysAreNotInTheFilters(t *testing.T) {
	scanned := func(key []byte) bool { return len(key) > 0 && key[0] == 's' }
	filters := map[bool]uint64{}
	for _, leaveOut := range []bool{false, true} {
		dir := t.TempDir()
		var sc localstore.Scanned
		if leaveOut {
			sc = scanned
		}
		s, _, err := localstore.OpenFor(dir, localstore.MinMemory, localstore.MostlyAbsent, sc, quiet)
		if err != nil {
			t.Fatal(err)
		}
		var w []bus.DiskWrite
		for i := range 5000 {
			w = append(w, bus.DiskWrite{Key: fmt.Appendf(nil, "g%05d", i), Val: []byte("v")},
				bus.DiskWrite{Key: fmt.Appendf(nil, "s%05d", i), Val: []byte("v")})
		}
		if err := s.Write(w); err != nil {
			t.Fatal(err)
		}
		s.Close() // flushed to a table
		if s, _, err = localstore.OpenFor(dir, localstore.MinMemory, localstore.MostlyAbsent, sc, quiet); err != nil {
			t.Fatal(err)
		}
		if filters[leaveOut], err = localstore.FilterBytes(s); err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{0, 2500, 4999} {
			if _, ok, err := s.Get(fmt.Appendf(nil, "g%05d", i)); err != nil || !ok {
				t.Fatalf("g%05d: found %v, err %v", i, ok, err)
			}
		}
		if _, ok, err := s.Get([]byte("g99999")); err != nil || ok {
			t.Fatalf("g99999, never written: found %v, err %v", ok, err)
		}
		_, _, err = s.Get([]byte("s00000"))
		if leaveOut != errors.Is(err, localstore.ErrScannedOnly) {
			t.Fatalf("Get of a scanned key, scanned keys left out %v: err %v", leaveOut, err)
		}
		n := 0
		if err := s.Scan([]byte("s"), []byte("t"), func(_, _ []byte) bool { n++; return true }); err != nil || n != 5000 {
			t.Fatalf("Scan of the scanned keys: %d, err %v; want 5000", n, err)
		}
		s.Close()
	}
	if filters[false] == 0 || filters[true]*10 > filters[false]*6 {
		t.Fatalf("filters of 10,000 keys, half of them scanned alone: %d bytes with them, %d without; want under 0.6 times as much without",
			filters[false], filters[true])
	}
}

// A store's memory holds its memtables and its cached blocks together:
// reading more blocks than it holds fills the cache to its memory less the
// memtables Pebble has reserved in it. Just reopened, the store has
// reserved its first memtables, which are small (under a memtable's
// size together), so the blocks take more than memory less one memtable;
// a cache sized at memory less one or two memtables would hold less.
func TestMemoryHoldsMemtablesAndBlocks(t *testing.T) {
	const memory = localstore.MinMemory
	dir := t.TempDir()
	s, _, err := localstore.OpenFor(dir, memory, localstore.MostlyAbsent, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	// 24 MiB of random values, three times the store's memory.
	rng := rand.New(rand.NewPCG(3, 4))
	const n, size = 48 << 10, 512
	for batch := 0; batch < n; batch += 1024 {
		var w []bus.DiskWrite
		for i := batch; i < batch+1024; i++ {
			val := make([]byte, size)
			for k := range val {
				val[k] = byte(rng.Uint32())
			}
			w = append(w, bus.DiskWrite{Key: binary.BigEndian.AppendUint64(nil, uint64(i)), Val: val})
		}
		if err := s.Write(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _, err = localstore.OpenFor(dir, memory, localstore.MostlyAbsent, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range n {
		if _, ok, err := s.Get(binary.BigEndian.AppendUint64(nil, uint64(i))); err != nil || !ok {
			t.Fatalf("key %d: found %v, err %v", i, ok, err)
		}
	}
	memtable := int64(memory / 8)
	got := localstore.CachedBytes(s)
	t.Logf("the cache holds %d bytes of blocks (memory %d, memtables of %d)", got, memory, memtable)
	if got <= memory-memtable {
		t.Fatalf("the cache holds %d bytes of blocks; want more than %d (memory less one memtable)", got, memory-memtable)
	}
}
