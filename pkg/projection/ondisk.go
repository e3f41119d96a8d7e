package projection

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// The keys of the read models on the replica's disk (bus.Disk): each
// model's entries under its own first byte, and each model's progress,
// the log sequence up to which its entries reflect the log, under
// keyProgress and its name.
const (
	keyProgress = 'p'
	keyTypeSeq  = 't' // t 0 tenant 0 type 0 seq(8): an event of the type
	keyTypeName = 'y' // y 0 tenant 0 type: the tenant has events of the type
	keyReceipt  = 'r' // r 0 tenant.corr 0 part: a part of a command's receipt
	keyRegistry = 'g' // g 0 aggType 0 tenant 0 id: a registry's record (registryDisk)
	keyLastSeq  = 'a' // a 0 tenant 0 aggType 0 id: seq(8) of the aggregate's last event
	keyCopy     = 'v' // v 0 seq(8): a copy of the event log's message at seq (EventCopies, in a store of its own)
)

// ScannedOnly reports whether key is read by Scan alone, never by Get:
// the type index's keys of events (keyTypeSeq), a third of the read
// models' keys; localstore leaves them out of its Bloom filters.
func ScannedOnly(key []byte) bool { return len(key) > 0 && key[0] == keyTypeSeq }

// DiskFormat names the layout of the read models on disk (their keys and
// values, and the records the folds make): change it with either, and a
// store written in another is rebuilt from the logs.
const DiskFormat = "agentbus-disk-2"

// keyFormat is the key of the format the store was written in.
var keyFormat = []byte{'f'}

// SameDiskFormat reports whether disk was written in DiskFormat, or is
// empty.
func SameDiskFormat(disk bus.Disk) (bool, error) {
	raw, ok, err := disk.Get(keyFormat)
	if err != nil || ok {
		return ok && string(raw) == DiskFormat, err
	}
	empty := true
	err = disk.Scan(nil, nil, func(_, _ []byte) bool { empty = false; return false })
	return empty, err
}

// MarkDiskFormat records that disk is written in DiskFormat.
func MarkDiskFormat(disk bus.Disk) error {
	return disk.Write([]bus.DiskWrite{{Key: keyFormat, Val: []byte(DiskFormat)}})
}

// ResettableDisk is a replica's disk that can be emptied
// (localstore.Store).
type ResettableDisk interface {
	bus.Disk
	// Reset removes every key.
	Reset() error
}

// ForgetOtherLogs empties disk when it was written in another format, or
// when one of its read models holds more of its log than the log's last
// sequence (commands, events): another log's, or kept across a restore.
// The read models are then rebuilt from the logs. It marks the disk's
// format.
func ForgetOtherLogs(disk ResettableDisk, subj bus.Subjects, commands, events uint64, log *slog.Logger) error {
	same, err := SameDiskFormat(disk)
	if err != nil {
		return err
	}
	if !same {
		log.Warn("the read models on disk were written in another format: rebuilding them from the logs", "format", DiskFormat)
		if err := disk.Reset(); err != nil {
			return err
		}
		return MarkDiskFormat(disk)
	}
	if err := MarkDiskFormat(disk); err != nil {
		return err
	}
	cmdHeld, evtHeld, err := NewHistory(disk, nil, subj, log).Progress()
	if err != nil {
		return err
	}
	typesHeld, err := NewTypeIndex(disk, subj, log).Progress()
	if err != nil {
		return err
	}
	regsHeld, err := NewRegistries(nil, disk, subj, log).Progress()
	if err != nil {
		return err
	}
	aggsHeld, err := NewAggregates(disk, subj, log).Progress()
	if err != nil {
		return err
	}
	evtHeld = max(evtHeld, typesHeld, regsHeld, aggsHeld)
	if cmdHeld <= commands && evtHeld <= events {
		return nil
	}
	log.Warn("the read models on disk hold more of the logs than the logs have (another log's, or a restore's): rebuilding them from the logs",
		"commandsHeld", cmdHeld, "commands", commands, "eventsHeld", evtHeld, "events", events)
	return disk.Reset()
}

// The parts of a receipt on disk, each written by one follower: the
// command's, from the command log, and its events', from the event log.
const (
	partCommand = "c"
	partEvents  = "e"
)

// Bounds of a model's writes: a batch goes to the disk when it holds
// diskBatch entries, and at least every diskFlushEvery.
const (
	diskBatch      = 256
	diskFlushEvery = 10 * time.Millisecond
	diskRetry      = 100 * time.Millisecond
)

// diskModel writes one read model's entries to the replica's disk in
// batches, each batch with the log sequence it brings the model to, so
// that what is on disk always reflects the log up to the sequence stored
// with it: a model restarts from there. Its entries not yet written, and
// those being written, are read back by get, which never waits for a
// write to the disk. Safe for concurrent use.
type diskModel struct {
	disk     bus.Disk
	name     string
	progress []byte
	log      *slog.Logger

	// flushing is held by the one write to the disk at a time, so that
	// batches reach it in order.
	flushing sync.Mutex

	mu      sync.Mutex
	pending []bus.DiskWrite
	latest  map[string][]byte // pending values by key
	writing map[string][]byte // values of the batch being written, by key
	seq     uint64            // the sequence pending brings the model to
	// absent holds keys getNoting found neither in memory nor on the disk
	// (0), or is looking for (the look's token, from looks), with no put
	// of them since: put is the only writer of a model's keys and drops
	// each key it writes from absent, and a look marks its key found
	// absent only if the key still holds its token (no put, no other
	// look since, which may have begun after a write reached the disk),
	// so a key held at 0 is absent. A new command's submission reads its
	// receipt's parts moments before the followers write them, and a
	// follower skips reading a key held at 0 (knownAbsent). At most
	// maxAbsent keys; when full it is emptied, which costs only reads.
	// nil until getNoting's first look: a model no look reads (the type
	// index, the aggregates, the copies) pays nothing for it in put.
	absent map[string]uint64
	looks  uint64
	// through is the sequence up to which the disk holds the model;
	// applied the one up to which get reads it (pending included).
	through, applied atomic.Uint64
}

func newDiskModel(disk bus.Disk, name string, log *slog.Logger) *diskModel {
	return &diskModel{disk: disk, name: name, progress: diskKey(keyProgress, name), log: log, latest: map[string][]byte{}}
}

// maxAbsent bounds a model's absent keys: 8 s of submissions ahead of
// its follower at 2,000 new commands a second; a full map of receipt
// keys (48 bytes with the tenant "default") holds 1.6 MiB of heap, 2.1
// with a 30-character tenant, and a History has two.
const maxAbsent = 1 << 14

// load reads the model's progress from the disk.
func (m *diskModel) load() (uint64, error) {
	seq, err := readProgress(m.disk, m.progress, m.name)
	if err != nil {
		return 0, err
	}
	m.through.Store(seq)
	m.applied.Store(seq)
	m.seq = seq
	return seq, nil
}

// readProgress reads the progress of the model name stored under key: the
// log sequence its entries on disk reflect, 0 when it has none.
func readProgress(disk bus.Disk, key []byte, name string) (uint64, error) {
	raw, ok, err := disk.Get(key)
	switch {
	case err != nil:
		return 0, fmt.Errorf("the %s's progress: %w", name, err)
	case !ok:
		return 0, nil
	case len(raw) != 8:
		return 0, fmt.Errorf("the %s's progress is %d bytes, not 8", name, len(raw))
	}
	return binary.BigEndian.Uint64(raw), nil
}

// get returns key's value, pending, being written or on disk. A value
// leaves writing only once the disk holds it, so one not found in memory
// is on the disk.
func (m *diskModel) get(key []byte) ([]byte, bool, error) {
	m.mu.Lock()
	val, ok := m.inMemoryLocked(key)
	m.mu.Unlock()
	if ok {
		return val, true, nil
	}
	return m.disk.Get(key)
}

// inMemoryLocked returns key's value pending or being written, with mu
// held.
func (m *diskModel) inMemoryLocked(key []byte) ([]byte, bool) {
	if val, ok := m.latest[string(key)]; ok {
		return val, true
	}
	val, ok := m.writing[string(key)]
	return val, ok
}

// getNoting is get, noting a key found absent for knownAbsent: the key is
// noted as looked for, with a token of this look, before the disk is
// read, and as absent after only if it still holds the token.
func (m *diskModel) getNoting(key []byte) ([]byte, bool, error) {
	m.mu.Lock()
	val, ok := m.inMemoryLocked(key)
	var look uint64
	if !ok {
		switch {
		case m.absent == nil:
			m.absent = map[string]uint64{}
		case len(m.absent) >= maxAbsent:
			clear(m.absent)
		}
		m.looks++
		look = m.looks
		m.absent[string(key)] = look
	}
	m.mu.Unlock()
	if ok {
		return val, true, nil
	}
	val, ok, err := m.disk.Get(key)
	m.mu.Lock()
	if held, in := m.absent[string(key)]; in && held == look {
		if err == nil && !ok {
			m.absent[string(key)] = 0
		} else {
			delete(m.absent, string(key))
		}
	}
	m.mu.Unlock()
	return val, ok, err
}

// knownAbsent reports whether getNoting found key absent with no put of
// it since, and forgets it: the caller, about to write key, need not read
// it.
func (m *diskModel) knownAbsent(key []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if held, in := m.absent[string(key)]; in && held == 0 {
		delete(m.absent, string(key))
		return true
	}
	return false
}

// put adds writes, which bring the model to sequence seq, and writes the
// batch when it is full; while the disk refuses it, put retries and
// waits (its caller, a follower of a log, falls behind meanwhile).
func (m *diskModel) put(ctx context.Context, seq uint64, writes ...bus.DiskWrite) {
	m.mu.Lock()
	for _, w := range writes {
		m.pending = append(m.pending, w)
		m.latest[string(w.Key)] = w.Val
		if len(m.absent) > 0 {
			delete(m.absent, string(w.Key))
		}
	}
	m.seq = seq
	m.applied.Store(seq)
	full := len(m.pending) >= diskBatch
	m.mu.Unlock()
	for full && m.flush() != nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(diskRetry):
		}
	}
}

// advance brings the model to seq with nothing to write.
func (m *diskModel) advance(seq uint64) {
	m.mu.Lock()
	m.seq = seq
	m.applied.Store(seq)
	m.mu.Unlock()
}

// flush writes what is pending, with the progress it brings, after the
// write in flight if there is one. Meanwhile get reads the batch from
// writing and put adds to a new one; a batch the disk refuses goes back
// before what was added since.
func (m *diskModel) flush() error {
	m.flushing.Lock()
	defer m.flushing.Unlock()
	m.mu.Lock()
	seq := m.seq
	if seq == m.through.Load() && len(m.pending) == 0 {
		m.mu.Unlock()
		return nil
	}
	batch := append(m.pending, bus.DiskWrite{Key: m.progress, Val: binary.BigEndian.AppendUint64(nil, seq)})
	m.writing, m.latest, m.pending = m.latest, map[string][]byte{}, nil
	m.mu.Unlock()

	err := m.disk.Write(batch)

	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if !errors.Is(err, bus.ErrDiskClosed) { // closed: the replica stops, the next start reads the rest again
			m.log.Error("writing a read model to the replica's disk failed; retrying", "model", m.name, "err", err)
		}
		// The batch without its progress, copied (its capacity cut), then
		// what was put since: the order of each key's writes is kept.
		m.pending = append(batch[:len(batch)-1:len(batch)-1], m.pending...)
		for k, v := range m.writing {
			if _, newer := m.latest[k]; !newer {
				m.latest[k] = v
			}
		}
		m.writing = nil
		return err
	}
	m.writing = nil
	m.through.Store(seq)
	return nil
}

// follow starts the model on the event log: it reads the model's
// progress from the disk, calls before (when not nil) to read what else
// the model keeps there, writes what is pending every diskFlushEvery, and
// hands apply each event of tail after the progress, until ctx ends. It
// returns at once unless the disk cannot be read. The whole stream (">"):
// the server counts what is pending after a full wildcard without a pass
// over the messages, as it must for "<prefix>.evt.>".
func (m *diskModel) follow(ctx context.Context, tail bus.Tail, before func() error, apply func(*bus.Event)) error {
	from, err := m.load()
	if err != nil {
		return err
	}
	if before != nil {
		if err := before(); err != nil {
			return err
		}
	}
	go m.run(ctx)
	tail.Follow(ctx, ">", from+1, apply)
	return nil
}

// run writes what is pending every diskFlushEvery until ctx ends.
func (m *diskModel) run(ctx context.Context) { flushEvery(ctx, m.flush) }

// flushEvery calls flush every diskFlushEvery, and once more when ctx
// ends.
func flushEvery(ctx context.Context, flush func() error) {
	t := time.NewTicker(diskFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = flush()
			return
		case <-t.C:
			_ = flush()
		}
	}
}

// waitThrough waits until the disk holds the model up to seq, or ctx
// ends.
func (m *diskModel) waitThrough(ctx context.Context, seq uint64) error {
	return m.waitFor(ctx, &m.through, seq)
}

// waitApplied waits until get reads the model up to seq, or ctx ends.
func (m *diskModel) waitApplied(ctx context.Context, seq uint64) error {
	return m.waitFor(ctx, &m.applied, seq)
}

func (m *diskModel) waitFor(ctx context.Context, mark *atomic.Uint64, seq uint64) error {
	for wait := 100 * time.Microsecond; mark.Load() < seq; wait = min(2*wait, 50*time.Millisecond) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the %s holds the log up to %d of %d: %w", m.name, mark.Load(), seq, ctx.Err())
		case <-time.After(wait):
		}
	}
	return nil
}

// LastStored returns the sequence of log's last message still stored, 0
// when it holds none: what a follower of the log can reach. The log's
// last sequence may name a message gone (aged out by the stream's max
// age), which no follower is ever handed.
func LastStored(ctx context.Context, log bus.Log) (uint64, error) {
	m, err := log.Last(ctx, ">")
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return m.Seq, nil
}

// diskKey joins a model's key: its first byte, then each part after a 0.
func diskKey(kind byte, parts ...string) []byte {
	n := 1
	for _, p := range parts {
		n += 1 + len(p)
	}
	k := make([]byte, 0, n+9)
	k = append(k, kind)
	for _, p := range parts {
		k = append(k, 0)
		k = append(k, p...)
	}
	return k
}
