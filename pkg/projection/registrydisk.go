package projection

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
)

// registryDisk is a registry's copy on the replica's disk: each record
// under its own key (keyRegistry, the aggregate type, the tenant, the id),
// whose value is the sequence of the last event of its aggregate the
// registry applied and then the record's JSON, and the registry's
// progress, the log sequence the records reflect. Changes go to the disk
// in batches, each with the progress it brings, so what is on disk is
// always the registry at one position of the log: a start loads it and
// replays only the log after that position.
//
// A key per record, written as the record changes, rather than periodic
// snapshots of the whole registry: a batch costs what changed since the
// last one, not every record; a start replays only what the last batch
// did not hold (a few milliseconds of the log, not everything since a
// snapshot); and nothing has to decide when a snapshot is due.
//
// Unlike diskModel, it never holds up its registry: the registry in
// memory is the read model, and its copy on disk only spares the next
// start a replay. While the disk refuses a batch, the changes wait in
// memory, the latest of each key only (so at most one per record), and go
// with the next batch. Safe for concurrent use.
type registryDisk struct {
	disk     bus.Disk
	aggType  string
	name     string
	progress []byte
	log      *slog.Logger

	mu      sync.Mutex
	pending map[string]bus.DiskWrite // by key, the latest change not on disk
	seq     uint64                   // the sequence pending brings the registry to
	through uint64                   // the sequence the disk holds the registry at
	failing bool                     // the disk refused the last batch
}

func newRegistryDisk(disk bus.Disk, aggType string, log *slog.Logger) *registryDisk {
	name := aggType + " registry"
	return &registryDisk{disk: disk, aggType: aggType, name: name, progress: diskKey(keyProgress, name), log: log,
		pending: map[string]bus.DiskWrite{}}
}

// held returns the log sequence the disk holds the registry at, 0 when it
// holds none.
func (d *registryDisk) held() (uint64, error) { return readProgress(d.disk, d.progress, d.name) }

// load reads the registry from the disk: it calls add with each record's
// tenant, id, sequence and JSON, each tenant's in id order, and returns
// the log sequence they hold the registry at (0 when the disk holds
// none: the log is replayed from its first event) and true. A value that
// is not a record (shorter than its sequence, or one add refuses) makes
// load log it, queue the removal of every record, and return 0 and false:
// what add was given must be dropped, and the registry built from the
// log's first event. An error is the disk's.
func (d *registryDisk) load(add func(tenant, id string, seq uint64, rec []byte) error) (uint64, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	through, err := d.held()
	if err != nil {
		return 0, false, err
	}
	from, to := d.bounds()
	var bad error
	err = d.disk.Scan(from, to, func(key, val []byte) bool {
		tenant, id, found := strings.Cut(string(key[len(from):]), "\x00")
		if !found || len(val) < 8 {
			bad = fmt.Errorf("the value of %q is not a record", key)
			return false
		}
		bad = add(tenant, id, binary.BigEndian.Uint64(val), val[8:])
		return bad == nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("the %s's records: %w", d.name, err)
	}
	d.seq, d.through = through, through
	if bad == nil {
		return through, true, nil
	}
	d.log.Warn("a record of the "+d.name+" on the replica's disk does not decode: the registry is built from the event log",
		"err", bad.Error())
	err = d.disk.Scan(from, to, func(key, _ []byte) bool {
		d.pending[string(key)] = bus.DiskWrite{Key: []byte(string(key)), Delete: true}
		return true
	})
	if err != nil {
		return 0, false, fmt.Errorf("the %s's records: %w", d.name, err)
	}
	d.seq = 0
	return 0, false, nil
}

// bounds returns the range of the registry's record keys: [from, to).
func (d *registryDisk) bounds() (from, to []byte) {
	prefix := diskKey(keyRegistry, d.aggType)
	return append(prefix, 0), append(prefix[:len(prefix):len(prefix)], 1)
}

// record is the write of tenant's record id, rec, whose aggregate's last
// event applied is at seq.
func (d *registryDisk) record(tenant, id string, seq uint64, rec any) bus.DiskWrite {
	val := binary.BigEndian.AppendUint64(nil, seq)
	return bus.DiskWrite{Key: diskKey(keyRegistry, d.aggType, tenant, id), Val: append(val, decide.MustJSON(rec)...)}
}

// removal is the write that removes tenant's record id.
func (d *registryDisk) removal(tenant, id string) bus.DiskWrite {
	return bus.DiskWrite{Key: diskKey(keyRegistry, d.aggType, tenant, id), Delete: true}
}

// put queues writes, which bring the registry to sequence seq, each in
// place of what was queued for its key, and writes the batch once it
// holds diskBatch keys; after a refusal, the batch waits for run's next
// tick instead.
func (d *registryDisk) put(seq uint64, writes ...bus.DiskWrite) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range writes {
		d.pending[string(w.Key)] = w
	}
	d.seq = seq
	if len(d.pending) >= diskBatch && !d.failing {
		_ = d.flushLocked()
	}
}

// flushLocked writes what is pending, with the progress it brings.
func (d *registryDisk) flushLocked() error {
	if len(d.pending) == 0 && d.seq == d.through {
		return nil
	}
	writes := make([]bus.DiskWrite, 0, len(d.pending)+1)
	for _, w := range d.pending {
		writes = append(writes, w)
	}
	writes = append(writes, bus.DiskWrite{Key: d.progress, Val: binary.BigEndian.AppendUint64(nil, d.seq)})
	if err := d.disk.Write(writes); err != nil {
		if !d.failing && !errors.Is(err, bus.ErrDiskClosed) { // closed: the replica stops
			d.log.Error("writing a registry to the replica's disk failed; its changes wait in memory and are retried",
				"registry", d.name, "err", err.Error())
		}
		d.failing = true
		return err
	}
	if d.failing {
		d.log.Info("the registry is written to the replica's disk again", "registry", d.name)
	}
	d.failing = false
	clear(d.pending)
	d.through = d.seq
	return nil
}

// run writes what is pending every diskFlushEvery, and once more when ctx
// ends.
func (d *registryDisk) run(ctx context.Context) {
	flushEvery(ctx, func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.flushLocked()
	})
}
