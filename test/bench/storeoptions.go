package main

// Stage store_options: Pebble's options for the read models' store,
// measured on what the soak's path asks of it. Each variant opens a store
// with localstore.Options (the options agentbus opens it with) or one
// option changed, then, at a steady rate, for each command: the three
// point reads of keys it does not hold that a new command makes on that
// path (the submission's two, of its receipt's parts, and the aggregate
// lookup; the receipt's followers do not read again what the submission
// found absent), and the four writes the read models make (the
// receipt's two parts with the values the history writes, the aggregate's
// last sequence, the type index's key). What it reports is the CPU the
// process spent per command, the store's compactions and disk, and how
// much of the cache held blocks at the end (docs/decisions.md, "The read
// models' store keeps Pebble's compression, blocks and L0 trigger…").

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/google/uuid"

	"github.com/agentbus/agentbus/pkg/localstore"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/settings"
)

type storeOptionsOptions struct {
	commands int
	rate     float64 // commands a second
	variants string  // comma-separated; "" all
}

// storeOptionsBatch is the commands whose writes go in one batch.
const storeOptionsBatch = 64

// storeOptionsTag starts the stage's command ids (commandBody's tag).
const storeOptionsTag = "store"

// storeVariant changes the options agentbus opens the read models' store
// with; memory is the store's (memory.index).
type storeVariant struct {
	name, what string
	change     func(o *pebble.Options, memory int64)
}

var storeVariants = []storeVariant{
	{"as_is", "localstore.Options for memory.index's default", func(*pebble.Options, int64) {}},
	{"cache_less_memtables", "a block cache of memory.index less two memtables (the sizing before 95ad8ef)", func(o *pebble.Options, memory int64) {
		o.Cache.Unref()
		o.Cache = pebble.NewCache(memory - 2*int64(o.MemTableSize))
	}},
	{"no_compression", "no compression at any level", func(o *pebble.Options, _ int64) {
		for i := range o.Levels {
			o.Levels[i].Compression = func() *block.CompressionProfile { return block.NoCompression }
		}
	}},
	{"l0_at_2", "L0 compacted at 2 tables (L0CompactionThreshold)", func(o *pebble.Options, _ int64) { o.L0CompactionThreshold = 2 }},
	{"memtable_3mib", "memtables of 3 MiB", func(o *pebble.Options, _ int64) { o.MemTableSize = 3 << 20 }},
	{"memtable_12mib", "memtables of 12 MiB", func(o *pebble.Options, _ int64) { o.MemTableSize = 12 << 20 }},
}

func storeOptionsStage(o storeOptionsOptions, rep *report) error {
	variants := storeVariants
	if o.variants != "" {
		variants = nil
		for _, name := range strings.Split(o.variants, ",") {
			i := slices.IndexFunc(storeVariants, func(v storeVariant) bool { return v.name == name })
			if i < 0 {
				return fmt.Errorf("store_options: unknown variant %q", name)
			}
			variants = append(variants, storeVariants[i])
		}
	}
	if o.commands < 5*storeOptionsBatch || !(o.rate > 0) {
		return fmt.Errorf("store_options: -store-options-commands must be at least %d and -store-options-rate above 0", 5*storeOptionsBatch)
	}
	memory := int64(settings.DefaultIndexBytes)
	fmt.Printf("13. The read models' store's options: %d new commands at %.0f/s, each three reads of absent keys and four writes (batches of %d commands, no fsync), memory %d MiB\n",
		o.commands, o.rate, storeOptionsBatch, memory>>20)
	fmt.Printf("    %s  loadavg %s\n", time.Now().UTC().Format(time.RFC3339), loadAvg())
	for _, v := range variants {
		runtime.GC()
		debug.FreeOSMemory()
		waitQuiet()
		r, err := storeOptionsRun(o, v, memory)
		if err != nil {
			return fmt.Errorf("store_options: %s: %w", v.name, err)
		}
		fmt.Printf("   %-21s %s\n", v.name, v.what)
		fmt.Printf("   %-21s CPU %.1f µs a command (first fifth %.1f, last fifth %.1f); %s for %s planned; compacted %d MiB in %d compactions; disk %d MiB in %d tables; cache holds %d MiB\n",
			"", r.cpuPerCommand, r.fifths[0], r.fifths[4], r.wall.Round(100*time.Millisecond), r.planned.Round(100*time.Millisecond),
			r.compacted>>20, r.compactions, r.disk>>20, r.tables, r.cached>>20)
		prefix := "store_options." + v.name
		rep.add(prefix+".cpu_per_command", r.cpuPerCommand, "µs")
		rep.add(prefix+".cpu_per_command.first_fifth", r.fifths[0], "µs")
		rep.add(prefix+".cpu_per_command.last_fifth", r.fifths[4], "µs")
		rep.add(prefix+".compacted_mib", float64(r.compacted>>20), "MiB")
		rep.add(prefix+".disk_mib", float64(r.disk>>20), "MiB")
		rep.add(prefix+".cached_mib", float64(r.cached>>20), "MiB")
		keptUp := 0.0
		if r.wall <= r.planned+r.planned/10 {
			keptUp = 1
		}
		rep.add(prefix+".kept_up", keptUp, "")
		rep.row("store_options "+v.name+" CPU per command", fmt.Sprintf("%.1f µs", r.cpuPerCommand), "", "")
	}
	return nil
}

type storeOptionsResult struct {
	cpuPerCommand float64    // µs
	fifths        [5]float64 // µs, each fifth of the commands
	wall, planned time.Duration
	compacted     uint64
	compactions   int64
	disk          int64
	tables        int64
	cached        int64
}

func storeOptionsRun(o storeOptionsOptions, v storeVariant, memory int64) (storeOptionsResult, error) {
	var r storeOptionsResult
	dir, err := os.MkdirTemp("", "agentbus-store-options-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	opts := localstore.Options(memory, localstore.MostlyAbsent, projection.ScannedOnly)
	v.change(opts, memory)
	opts.Logger = quietPebbleLogger{}
	db, err := pebble.Open(dir, opts)
	opts.Cache.Unref() // the DB holds its own reference
	if err != nil {
		return r, err
	}
	closed := false
	defer func() {
		if !closed {
			db.Close()
		}
	}()
	get := func(key []byte) error { // as localstore's Get
		it, err := db.NewIter(&pebble.IterOptions{UseL6Filters: true})
		if err != nil {
			return err
		}
		found := it.SeekPrefixGE(key) && string(it.Key()) == string(key)
		if err := it.Close(); err != nil || !found {
			return err
		}
		return fmt.Errorf("key %q found: the stage reads keys never written", key)
	}
	const tenant, aggType, cmdType, evtType = "default", "Order", "PlaceOrder", "OrderPlaced"
	start, cpu0 := time.Now(), ownCPU()
	fifthCPU, fifth := cpu0, o.commands/5
	b := db.NewBatch()
	defer b.Close()
	for i := range o.commands {
		seq := uint64(i + 1)
		// The correlation id agentbus derives for the bench's command i
		// (as the soak's); the order's id a client's random one.
		corr, order := commandCorrelation(storeOptionsTag, i), uuid.NewString()
		cmdKey, evtKey := storeKey('r', tenant+"."+corr, "c"), storeKey('r', tenant+"."+corr, "e")
		aggKey := storeKey('a', tenant, aggType, order)
		for _, k := range [][]byte{cmdKey, evtKey, aggKey} {
			if err := get(k); err != nil {
				return r, err
			}
		}
		now := time.Now().UTC()
		cmd := projection.AppendReceiptPart(nil, &projection.Receipt{Type: cmdType, CommandID: storeOptionsTag + "-" + strconv.Itoa(i), Source: benchSource,
			Time: now.Format(time.RFC3339Nano), CommandSeq: seq, Status: projection.StatusAccepted, UpdatedAt: now})
		evt := projection.AppendReceiptPart(nil, &projection.Receipt{CommandSeq: seq, Type: cmdType, Status: projection.StatusProcessed,
			Events: []uint64{seq}, UpdatedAt: now})
		typeKey := binary.BigEndian.AppendUint64(append(storeKey('t', tenant, evtType), 0), seq)
		for _, w := range [][2][]byte{{cmdKey, cmd}, {evtKey, evt}, {aggKey, binary.BigEndian.AppendUint64(nil, seq)}, {typeKey, nil}} {
			if err := b.Set(w[0], w[1], nil); err != nil {
				return r, err
			}
		}
		if (i+1)%storeOptionsBatch == 0 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return r, err
			}
			b.Reset()
		}
		if (i+1)%fifth == 0 && (i+1)/fifth <= 5 {
			c := ownCPU()
			r.fifths[(i+1)/fifth-1] = float64((c - fifthCPU).Microseconds()) / float64(fifth)
			fifthCPU = c
		}
		if due := start.Add(time.Duration(float64(i+1) / o.rate * float64(time.Second))); time.Until(due) > 0 {
			time.Sleep(time.Until(due))
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return r, err
	}
	r.wall, r.planned = time.Since(start), time.Duration(float64(o.commands)/o.rate*float64(time.Second))
	r.cpuPerCommand = float64((ownCPU() - cpu0).Microseconds()) / float64(o.commands)
	m := db.Metrics()
	r.compacted, r.compactions = m.Total().TableBytesCompacted, m.Compact.Count
	r.tables, r.cached = m.Total().TablesCount, m.BlockCache.Size
	closed = true
	if err := db.Close(); err != nil {
		return r, err
	}
	r.disk, err = dirSize(dir)
	return r, err
}

// storeKey is a key of the read models' layout (pkg/projection's diskKey):
// the model's byte, then each part after a NUL.
func storeKey(kind byte, parts ...string) []byte {
	k := []byte{kind}
	for _, p := range parts {
		k = append(append(k, 0), p...)
	}
	return k
}
