// Package localstore is the replica's own store on local disk (bus.Disk),
// on Pebble: an ordered key-value store whose memory is bounded by one
// figure (its block cache and memtables). It holds read models that are
// rebuilt from the logs (pkg/projection), so a store that is missing or
// damaged is started empty, never trusted, and nothing in it is synced
// on each write. Why Pebble and not bbolt: docs/decisions.md, "The
// replica's disk".
package localstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/agentbus/agentbus/pkg/bus"
)

// MinMemory is the least memory Open accepts: room for two memtables and
// a cache of blocks beside them.
const MinMemory = 8 << 20

// Store is a bus.Disk on Pebble. Safe for concurrent use.
type Store struct {
	// mu is held to read while the store is used, and to write by Close:
	// a use after Close is ErrClosed, not Pebble's panic.
	mu      sync.RWMutex
	closed  bool
	db      *pebble.DB
	lock    *pebble.Lock
	cache   interface{ Unref() }
	dir     string
	memory  int64
	lookups Lookups
	scanned Scanned
	log     *slog.Logger
}

var _ bus.Disk = (*Store)(nil)

// ErrClosed is returned by a use of a closed Store.
var ErrClosed = bus.ErrDiskClosed

// ErrInUse is returned by Open when another process holds dir.
var ErrInUse = errors.New("the store is in use by another process")

// Lookups says what a store's point reads (Get) mostly ask for, which
// decides whether its tables carry Bloom filters.
type Lookups int

const (
	// MostlyAbsent: most point reads ask for a key the store does not hold
	// (a new command's receipt); each table's Bloom filter answers them
	// without reading a block.
	MostlyAbsent Lookups = iota
	// Held: point reads ask for keys the store holds (an event's copy, by
	// its sequence); a filter would be written, read and cached for
	// nothing, at the cost of the blocks it pushes out of the cache.
	Held
)

// Scanned says which keys the store's user reads by Scan alone, never by
// Get. A MostlyAbsent store leaves them out of its Bloom filters, which
// every Get reads and the block cache must hold, and Get refuses them.
// nil: every key may be read by Get.
type Scanned func(key []byte) bool

// ErrScannedOnly is returned by a Get of a key the store's Scanned says is
// read by Scan alone.
var ErrScannedOnly = errors.New("the key is read by Scan alone: it is not in the Bloom filters Get reads")

// Open opens the store in dir as OpenFor does, for MostlyAbsent lookups of
// any key.
func Open(dir string, memory int64, log *slog.Logger) (s *Store, rebuilt bool, err error) {
	return OpenFor(dir, memory, MostlyAbsent, nil, log)
}

// OpenFor opens the store in dir, creating it when absent, with at most
// memory bytes (at least MinMemory) for its cache and memtables, its
// tables made for lookups (a change of lookups applies to the tables
// written from then on; those written before keep what they carry). A
// store that does not open (a damaged manifest, a table missing or of
// another size than written: truncated) is emptied and opened anew, and
// OpenFor reports that with rebuilt true: its read models start from the
// logs' first messages. Another process using
// dir is ErrInUse, and a store the host refuses (permissions, file
// descriptors, a full disk) is an error: in both cases nothing is
// changed. scanned (may be nil) is the keys read by Scan alone.
func OpenFor(dir string, memory int64, lookups Lookups, scanned Scanned, log *slog.Logger) (s *Store, rebuilt bool, err error) {
	if memory < MinMemory {
		return nil, false, fmt.Errorf("the store's memory %d is below %d bytes", memory, MinMemory)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, err
	}
	lock, err := pebble.LockDirectory(dir, vfs.Default)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w (%v); give each agentbus its own --data", dir, ErrInUse, err)
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	// Pebble's Open checks that each table its manifest lists is on disk
	// at the size written: a truncated or missing one fails it.
	s, err = open(dir, memory, lookups, scanned, lock, log)
	if err == nil {
		return s, false, nil
	}
	if notDamage(err) {
		return nil, false, fmt.Errorf("open the store in %s: %w", dir, err)
	}
	log.Warn("the replica's on-disk store is damaged: emptied, its read models are rebuilt from the logs", "dir", dir, "err", err.Error())
	if err := empty(dir); err != nil {
		return nil, false, fmt.Errorf("empty the damaged store %s: %w", dir, err)
	}
	s, err = open(dir, memory, lookups, scanned, lock, log)
	if err != nil {
		return nil, false, err
	}
	return s, true, nil
}

// A Held store compacts L0 once it holds heldL0Tables tables, into tables
// of at most heldTableSize (twice that in the level below L0, as Pebble
// sizes them).
const (
	heldL0Tables  = 8
	heldTableSize = 32 << 20
)

// Options returns the Pebble options a store of memory bytes opens with
// for lookups (scanned, which may be nil: the keys read by Scan alone),
// but its lock, logger and event listener: what test/bench's
// store_options stage measures against variants of them. opts.Cache
// holds a reference the caller releases (Unref) once the database opened
// with opts is open, or when it does not open.
func Options(memory int64, lookups Lookups, scanned Scanned) *pebble.Options {
	memtable := uint64(memory / 8)
	if lookups == Held {
		// Keys in order (the copies of the events): lookups spread over
		// the whole store gain little from a cache, and larger memtables
		// flush to fewer tables (docs/decisions.md, "The copies' tables
		// are merged").
		memtable = uint64(memory * 3 / 8)
	}
	// Pebble reserves each memtable's memory in the block cache it is
	// given (Cache.Reserve: the mutable memtable, one flushing or kept
	// for reuse, and any an iterator still reads): a cache of memory holds
	// blocks up to memory less the memtables, so cache and memtables
	// together stay within memory. A cache of memory less two memtables
	// would leave the blocks memory less four once both are full, and two
	// memtables' worth of memory unused (docs/decisions.md, "Memory is
	// one setting").
	opts := &pebble.Options{
		Cache:                       pebble.NewCache(memory),
		MemTableSize:                memtable,
		MemTableStopWritesThreshold: 2,
	}
	if lookups == Held {
		// Each flushed table overlaps no other, so by default Pebble
		// leaves them in L0 and moves them down whole, never merging them:
		// a long log would be thousands of small tables, more than Pebble
		// keeps open (a lookup's first read of a table opens it).
		// Compacting L0 at heldL0Tables merges them: 372 tables for 10M
		// events instead of 1,583, at about 1.5 µs more CPU per copy.
		opts.L0CompactionFileThreshold = heldL0Tables
		opts.TargetFileSizes[0] = heldTableSize
	}
	for i := range opts.Levels {
		if lookups == MostlyAbsent {
			opts.Levels[i].FilterPolicy = getFilter{bloom.FilterPolicy(10), scanned}
		}
	}
	return opts
}

// open opens the Pebble store in dir, locked by lock.
func open(dir string, memory int64, lookups Lookups, scanned Scanned, lock *pebble.Lock, log *slog.Logger) (*Store, error) {
	opts := Options(memory, lookups, scanned)
	cache := opts.Cache
	opts.Lock, opts.Logger, opts.EventListener = lock, logger{log}, stallListener(log)
	db, err := pebble.Open(dir, opts)
	if err != nil {
		cache.Unref()
		return nil, err
	}
	if err := warm(db, log); err != nil {
		db.Close()
		cache.Unref()
		return nil, err
	}
	return &Store{db: db, lock: lock, cache: cache, dir: dir, memory: memory, lookups: lookups, scanned: scanned, log: log}, nil
}

// warmTables bounds the tables warm reads: under Pebble's 1,000 open
// tables (MaxOpenFiles) for each of the replica's two stores.
const warmTables = 500

// warm reads the first key of each of db's tables (at most warmTables), as
// Get does. A table's first read opens it and reads its index and, in a
// MostlyAbsent store, its Bloom filter (a filter of a large table is over
// a megabyte): 0.10–0.25 ms at the median, up to 1.9 ms, against
// 0.03–0.12 ms for a block of a table already read. Done at the start,
// that cost is not paid by lookups (docs/decisions.md, "Each table is read
// once at the start"). A read that fails (a block that does not match its
// checksum) is returned: the store is damaged.
func warm(db *pebble.DB, log *slog.Logger) error {
	t0 := time.Now()
	levels, err := db.SSTables()
	if err != nil {
		return err
	}
	n := 0
	defer func() {
		if n > 0 {
			log.Debug("the store's tables read once", "tables", n, "took", time.Since(t0).Round(time.Millisecond).String())
		}
	}()
	for _, tables := range levels {
		for _, t := range tables {
			if n == warmTables {
				return nil
			}
			if _, _, err := get(db, t.Smallest.UserKey); err != nil {
				return err
			}
			n++
		}
	}
	return nil
}

// notDamage reports whether err says the host refused the store (its
// permissions, its file descriptors, its disk full) rather than that the
// store is damaged: emptying it would not help and would lose it.
func notDamage(err error) bool {
	return errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EROFS)
}

// empty removes everything in dir but its lock file.
func empty(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == "LOCK" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Get implements bus.Disk. It looks key up with an iterator that reads
// the Bloom filters (a MostlyAbsent store's) of every level, the last
// included, as Pebble documents for lookups that mostly find nothing (a
// new command's receipt): DB.Get leaves the last level's filters out, so
// a miss there reads a block (docs/decisions.md, "The replica's disk").
func (s *Store) Get(key []byte) ([]byte, bool, error) {
	if s.scanned != nil && s.scanned(key) {
		return nil, false, fmt.Errorf("get %q: %w", key, ErrScannedOnly)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, false, ErrClosed
	}
	return get(s.db, key)
}

// getFilter is a Bloom filter of the keys Get may read: the keys scanned
// says are read by Scan alone are not added. Its name is Pebble's Bloom
// filter's: which keys a table's filter holds is the table's own
// business (as Pebble's FilterPolicy documents), so the tables written
// before, whose filters hold every key, are read as they are.
type getFilter struct {
	bloom.FilterPolicy
	scanned Scanned
}

// NewWriter implements pebble.FilterPolicy.
func (f getFilter) NewWriter(t pebble.FilterType) pebble.FilterWriter {
	w := f.FilterPolicy.NewWriter(t)
	if f.scanned == nil {
		return w
	}
	return getFilterWriter{w, f.scanned}
}

// getFilterWriter adds to its filter the keys not scanned alone.
type getFilterWriter struct {
	pebble.FilterWriter
	scanned Scanned
}

// AddKey implements pebble.FilterWriter.
func (w getFilterWriter) AddKey(key []byte) {
	if !w.scanned(key) {
		w.FilterWriter.AddKey(key)
	}
}

// get is Get on db.
func get(db *pebble.DB, key []byte) ([]byte, bool, error) {
	it, err := db.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return nil, false, err
	}
	var val []byte
	found := it.SeekPrefixGE(key) && bytes.Equal(it.Key(), key)
	if found {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return nil, false, err
		}
		val = bytes.Clone(v)
	}
	return val, found, it.Close()
}

// Scan implements bus.Disk.
func (s *Store) Scan(from, to []byte, fn func(key, val []byte) bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: to})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		val, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		if !fn(it.Key(), val) {
			break
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

// Write implements bus.Disk.
func (s *Store) Write(writes []bus.DiskWrite) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, w := range writes {
		var err error
		if w.Delete {
			err = b.Delete(w.Key, nil)
		} else {
			err = b.Set(w.Key, w.Val, nil)
		}
		if err != nil {
			return err
		}
	}
	return b.Commit(pebble.NoSync)
}

// Close writes the memtables to tables, so that the next Open replays no
// log of the store's own, and releases the store. Safe to call more than
// once, and on a nil Store.
func (s *Store) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.db.Flush()
	err = errors.Join(err, s.close())
	return errors.Join(err, s.lock.Close())
}

// Reset empties the store: its read models start from the logs' first
// messages.
func (s *Store) Reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.close(); err != nil {
		s.closed = true
		return err
	}
	if err := empty(s.dir); err != nil {
		s.closed = true
		return err
	}
	fresh, err := open(s.dir, s.memory, s.lookups, s.scanned, s.lock, s.log)
	if err != nil {
		s.closed = true
		return err
	}
	s.db, s.cache = fresh.db, fresh.cache
	return nil
}

// close closes the database and its cache, keeping the lock.
func (s *Store) close() error {
	err := s.db.Close()
	s.cache.Unref()
	return err
}

// stallListener warns of the times Pebble holds up writes (its memtables
// full while one is flushed, or too many tables in its first level while
// compactions catch up): a read model's follower waits meanwhile, and its
// lookups fall behind the log. Each stall is one warning when it ends,
// with how long it lasted.
func stallListener(log *slog.Logger) *pebble.EventListener {
	var (
		mu     sync.Mutex
		since  time.Time
		reason string
	)
	return &pebble.EventListener{
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			mu.Lock()
			since, reason = time.Now(), info.Reason
			mu.Unlock()
		},
		WriteStallEnd: func() {
			mu.Lock()
			d, why := time.Since(since), reason
			mu.Unlock()
			log.Warn("the replica's on-disk store held up its writes", "store", "localstore", "reason", why, "for", d.Round(time.Millisecond).String())
		},
	}
}

// logger sends Pebble's log lines to the process's log: its routine
// lines at debug level, its errors as errors. A fatal error of Pebble's
// (a corruption it cannot go on from) panics, as Pebble requires.
type logger struct{ log *slog.Logger }

func (l logger) Infof(format string, args ...any) {
	l.log.Debug(strings.TrimSpace(fmt.Sprintf(format, args...)), "store", "localstore")
}

func (l logger) Errorf(format string, args ...any) {
	l.log.Error(strings.TrimSpace(fmt.Sprintf(format, args...)), "store", "localstore")
}

func (l logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error(msg, "store", "localstore")
	panic("localstore: " + strconv.Quote(msg))
}
