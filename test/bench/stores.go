package main

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	bolt "go.etcd.io/bbolt"
)

// The stores stage (`-only stores`; not part of `make bench`) measures the
// two embedded stores considered for agentbus's per-replica on-disk read
// models, Pebble and bbolt, on the shapes of those models:
//
//   - the correlation index: key `<tenant>.<correlationId>` (ids of 22, 36
//     or 40 characters, random), value a JSON receipt of 150–300 bytes,
//     written once per command and every fourth one written again 1,000
//     events later (accepted, then processed); read by point lookups, most
//     of them misses (was this command accepted before?);
//   - the type index: key `t\x00<tenant>\x00<eventType>\x00<8-byte
//     big-endian sequence>`, empty value, appended in sequence order (16
//     tenants × 8 types, so 128 interleaved runs); read by range scans of a
//     page of 1,000 from a sequence.
//
// Each event writes one receipt and one type key; 256 events go in one
// batch with the sequence the batch brings the index to, without an fsync
// (the log is the source of truth). The write time runs until the store
// has settled (Pebble's memtable flushed and its compactions done). The
// store is then closed, reopened (timed) and read: point lookups of keys
// written and of keys never written, range scans, then its memory; then
// closed again, its files dropped from the OS's page cache, reopened and
// read cold. Each store is measured in a process of its own (runIsolated),
// in agentbus's default memory mode, so that its resident memory is its
// own; run without -stores-engine in one process, the stores are measured
// one after the other with a collection between them.

// storeEngines are the stores measured, in order.
var storeEngines = []string{"pebble", "bbolt"}

// storesOptions are the stores stage's settings.
type storesOptions struct {
	records int    // events written: receipts and type keys, N of each
	engine  string // the one store this process measures; "" all, in turn
}

const (
	storesBatch       = 256     // events per write batch
	storesRewriteLag  = 1000    // a receipt written again this many events later
	storesRewriteEach = 4       // … one in this many
	storesTenants     = 16      // tenants
	storesTypes       = 8       // event types of each tenant
	storesGets        = 100_000 // point lookups of each kind (hits, misses)
	storesColdGets    = 10_000  // … of each kind with the files out of the page cache
	storesScans       = 10_000  // range scans
	storesScanLen     = 1000    // keys a scan reads
	storesCacheBytes  = 64 << 20
	storesMemtable    = 8 << 20
)

// storesSeed makes the written correlation ids; storesMissSeed ids never
// written.
const (
	storesSeed     = 0x5eed_0001
	storesMissSeed = 0x5eed_0002
)

// kvStore is one store under test.
type kvStore interface {
	open(dir string) error
	apply(b *storesBatchBuf) error
	settle() error // returns once the writes' background work is done
	get(key []byte, into []byte) ([]byte, bool, error)
	scan(lower, upper []byte, n int, into []uint64) ([]uint64, error)
	close() error
	describe() string // its settings, one line
	stats() string    // what it says about its cache, after the reads; "" none
}

// storeKind says which model a key belongs to: a bucket for bbolt; for
// Pebble the keys of the models differ in their first bytes already.
type storeKind uint8

const (
	kindCorrelation storeKind = iota
	kindType
	kindMeta
)

// storesBatchBuf is a write batch: entries sliced out of one buffer, which
// stays valid until the batch is applied (bbolt keeps the slices a
// transaction is given until it commits).
type storesBatchBuf struct {
	buf     []byte
	entries []storesEntry
}

type storesEntry struct {
	kind       storeKind
	key, value [2]int // offset, length in buf
}

func (b *storesBatchBuf) reset() { b.buf, b.entries = b.buf[:0], b.entries[:0] }

// put adds an entry whose key and value are appended to buf by k and v.
func (b *storesBatchBuf) put(kind storeKind, k, v func([]byte) []byte) {
	k0 := len(b.buf)
	b.buf = k(b.buf)
	v0 := len(b.buf)
	if v != nil {
		b.buf = v(b.buf)
	}
	b.entries = append(b.entries, storesEntry{kind: kind, key: [2]int{k0, v0 - k0}, value: [2]int{v0, len(b.buf) - v0}})
}

func (b *storesBatchBuf) each(f func(kind storeKind, k, v []byte) error) error {
	for _, e := range b.entries {
		if err := f(e.kind, b.buf[e.key[0]:e.key[0]+e.key[1]], b.buf[e.value[0]:e.value[0]+e.value[1]]); err != nil {
			return err
		}
	}
	return nil
}

var storesEventTypes = [storesTypes]string{"OrderPlaced", "OrderPaid", "OrderShipped", "OrderCancelled", "PaymentFailed", "StockReserved", "StockReleased", "InvoiceIssued"}

// storesShape says, for event i, its tenant and its event type.
func storesShape(i uint64) (tenant, typ int) {
	h := (i + 1) * 0x9e3779b97f4a7c15
	h ^= h >> 29
	return int(h % storesTenants), int((h >> 8) % storesTypes)
}

func storesTenant(t int) string { return "tenant-" + strconv.Itoa(t) }

// appendCorrKey appends event i's correlation key, or, with seed
// storesMissSeed, a key of the same shape that is never written.
func appendCorrKey(b []byte, i uint64, seed uint64) []byte {
	t, _ := storesShape(i)
	b = append(b, storesTenant(t)...)
	b = append(b, '.')
	r := rand.NewPCG(seed, i)
	var raw [32]byte
	for j := 0; j < len(raw); j += 8 {
		binary.LittleEndian.PutUint64(raw[j:], r.Uint64())
	}
	switch i % 3 {
	case 0: // a UUID, 36 characters
		var u [36]byte
		hex.Encode(u[0:8], raw[0:4])
		u[8] = '-'
		hex.Encode(u[9:13], raw[4:6])
		u[13] = '-'
		hex.Encode(u[14:18], raw[6:8])
		u[18] = '-'
		hex.Encode(u[19:23], raw[8:10])
		u[23] = '-'
		hex.Encode(u[24:36], raw[10:16])
		return append(b, u[:]...)
	case 1: // 16 bytes in base64, 22 characters
		return base64.RawURLEncoding.AppendEncode(b, raw[:16])
	default: // a hash of 30 bytes in base64, 40 characters
		return base64.RawURLEncoding.AppendEncode(b, raw[:30])
	}
}

// appendReceipt appends event i's receipt, 150–300 bytes of JSON.
func appendReceipt(b []byte, i uint64, processed bool) []byte {
	r := rand.NewPCG(storesSeed+7, i)
	status, events := "accepted", ""
	if processed {
		status, events = "processed", `"eventSeqs":[`+strconv.FormatUint(i+1, 10)+`],`
	}
	b = append(b, `{"commandId":"cmd-`...)
	b = strconv.AppendUint(b, r.Uint64(), 36)
	b = append(b, `","commandType":"place-order/1.0","status":"`...)
	b = append(b, status...)
	b = append(b, `","commandSeq":`...)
	b = strconv.AppendUint(b, i+1, 10)
	b = append(b, ',')
	b = append(b, events...)
	b = append(b, `"acceptedAt":"2026-11-29T07:`...)
	b = fmt.Appendf(b, "%02d:%02d.%06dZ", i/60%60, i%60, r.Uint64()%1_000_000)
	b = append(b, `","source":"key:`...)
	b = strconv.AppendUint(b, r.Uint64()%(1<<32), 16)
	b = append(b, `","aggregate":"order-`...)
	b = strconv.AppendUint(b, r.Uint64(), 36)
	b = append(b, `","note":"`...)
	for n := r.Uint64() % 110; n > 0; n-- { // the length varies
		b = append(b, "abcdefghijklmnopqrstuvwxyz0123456789"[r.Uint64()%36])
	}
	return append(b, `"}`...)
}

// appendTypeKey appends the type-index key of (tenant, type) at seq.
func appendTypeKey(b []byte, tenant, typ int, seq uint64) []byte {
	b = append(b, 't', 0)
	b = append(b, storesTenant(tenant)...)
	b = append(b, 0)
	b = append(b, storesEventTypes[typ]...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint64(b, seq)
}

// typeKeyEnd is the key just past every key of (tenant, type).
func typeKeyEnd(tenant, typ int) []byte {
	b := append([]byte{'t', 0}, storesTenant(tenant)...)
	b = append(b, 0)
	b = append(b, storesEventTypes[typ]...)
	return append(b, 1)
}

var storesAppliedKey = []byte("m\x00applied")

// storesResult is one store's figures.
type storesResult struct {
	engine         string
	write, commits time.Duration // all of it, the store settled; the commits alone
	keys           int           // keys put
	disk           int64         // bytes of its files after the writes
	reopen         time.Duration

	hit, miss, scan     []time.Duration
	hitWrong, missWrong int
	scanKeys            int

	heapInuse                   uint64 // after the reads
	rss, rssAnon, rssFile       int64  // after the reads
	rssStart, rssFileStart      int64  // before the store was first opened
	writeHeapInuse, writeRSS    int64  // at the end of the writes
	coldReopen                  time.Duration
	coldHit, coldMiss           []time.Duration
	coldSkipped                 string          // why there are no cold figures
	plainHit, plainMiss         []time.Duration // Pebble's DB.Get beside its get (nil for bbolt)
	plainColdHit, plainColdMiss []time.Duration
}

func storesStage(o storesOptions, rep *report) error {
	if o.records < storesBatch {
		return fmt.Errorf("stores: -stores-records must be at least %d", storesBatch)
	}
	engines := storeEngines
	if o.engine != "" {
		engines = []string{o.engine}
	}
	fmt.Printf("11. Stores for the on-disk read models: %d events (a receipt and a type-index key each, every %dth receipt written again %d events later),\n",
		o.records, storesRewriteEach, storesRewriteLag)
	fmt.Printf("    in batches of %d without fsync; then, reopened, %d point gets of keys written and %d of keys never written, %d scans of %d type-index keys;\n",
		storesBatch, storesGets, storesGets, storesScans, storesScanLen)
	fmt.Printf("    then, reopened with its files dropped from the OS's page cache, %d gets of keys never written and %d of keys written (cold)\n",
		storesColdGets, storesColdGets)
	fmt.Printf("    %s  loadavg %s\n", time.Now().UTC().Format(time.RFC3339), loadAvg())
	for n, e := range engines {
		if n > 0 { // several in one process: leave the last one's memory behind
			runtime.GC()
			debug.FreeOSMemory()
		}
		var s kvStore
		switch e {
		case "pebble":
			s = &pebbleStore{}
		case "bbolt":
			s = &boltStore{}
		default:
			return fmt.Errorf("stores: unknown store %q (%v)", e, storeEngines)
		}
		r, err := storesRun(o, e, s)
		if err != nil {
			return fmt.Errorf("stores: %s: %w", e, err)
		}
		storesReport(o, r, rep)
	}
	return nil
}

func storesRun(o storesOptions, engine string, s kvStore) (storesResult, error) {
	res := storesResult{engine: engine}
	dir, err := os.MkdirTemp("", "agentbus-stores-"+engine+"-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("   %s: %s\n", engine, s.describe())
	runtime.GC()
	debug.FreeOSMemory()
	res.rssStart, res.rssFileStart = procStatus("VmRSS"), procStatus("RssFile")
	waitQuiet()
	if err := s.open(dir); err != nil {
		return res, err
	}
	n := uint64(o.records)
	var b storesBatchBuf
	t0 := time.Now()
	for i := uint64(0); i < n; i++ {
		b.put(kindCorrelation, func(k []byte) []byte { return appendCorrKey(k, i, storesSeed) },
			func(v []byte) []byte { return appendReceipt(v, i, false) })
		t, ty := storesShape(i)
		b.put(kindType, func(k []byte) []byte { return appendTypeKey(k, t, ty, i+1) }, nil)
		if j := i - storesRewriteLag; i >= storesRewriteLag && j%storesRewriteEach == 0 {
			b.put(kindCorrelation, func(k []byte) []byte { return appendCorrKey(k, j, storesSeed) },
				func(v []byte) []byte { return appendReceipt(v, j, true) })
		}
		if (i+1)%storesBatch == 0 || i+1 == n {
			b.put(kindMeta, func(k []byte) []byte { return append(k, storesAppliedKey...) },
				func(v []byte) []byte { return binary.BigEndian.AppendUint64(v, i+1) })
			res.keys += len(b.entries)
			if err := s.apply(&b); err != nil {
				s.close()
				return res, err
			}
			b.reset()
		}
	}
	res.commits = time.Since(t0)
	if err := s.settle(); err != nil {
		s.close()
		return res, err
	}
	res.write = time.Since(t0)
	var mstats runtime.MemStats
	runtime.ReadMemStats(&mstats)
	res.writeHeapInuse, res.writeRSS = int64(mstats.HeapInuse), procStatus("VmRSS")
	if err := s.close(); err != nil {
		return res, err
	}
	if res.disk, err = dirSize(dir); err != nil {
		return res, err
	}
	fmt.Printf("   %s: %d events written in %.1f s, the store settled included (%.0f events/s, %.0f keys/s; the commits alone %.1f s); %.0f MiB on disk\n",
		engine, n, res.write.Seconds(), float64(n)/res.write.Seconds(), float64(res.keys)/res.write.Seconds(), res.commits.Seconds(), mib(res.disk))

	// The reads, in the store reopened after that clean close, in a process
	// whose garbage from the writes is gone.
	runtime.GC()
	debug.FreeOSMemory()
	waitQuiet()
	t0 = time.Now()
	if err := s.open(dir); err != nil {
		return res, err
	}
	res.reopen = time.Since(t0)
	defer s.close()

	rng := rand.New(rand.NewPCG(1, 2))
	if res.hit, err = storesGetRun(s.get, rng, n, storesGets, storesSeed, &res.hitWrong); err != nil {
		return res, err
	}
	if res.miss, err = storesGetRun(s.get, rng, n, storesGets, storesMissSeed, &res.missWrong); err != nil {
		return res, err
	}
	plain, hasPlain := s.(plainGetter)
	if hasPlain {
		if res.plainHit, err = storesGetRun(plain.getPlain, rng, n, storesGets, storesSeed, &res.hitWrong); err != nil {
			return res, err
		}
		if res.plainMiss, err = storesGetRun(plain.getPlain, rng, n, storesGets, storesMissSeed, &res.missWrong); err != nil {
			return res, err
		}
	}
	// A scan starts at a random sequence of a random (tenant, type), early
	// enough that 1,000 of its keys follow on average.
	startMax := int64(n) - int64(1.1*storesScanLen*storesTenants*storesTypes)
	seqs := make([]uint64, 0, storesScanLen)
	res.scan = make([]time.Duration, storesScans)
	var lower []byte
	for k := range res.scan {
		tn, ty := rng.IntN(storesTenants), rng.IntN(storesTypes)
		from := uint64(1)
		if startMax > 1 {
			from = 1 + rng.Uint64N(uint64(startMax))
		}
		lower = appendTypeKey(lower[:0], tn, ty, from)
		upper := typeKeyEnd(tn, ty)
		t := time.Now()
		got, err := s.scan(lower, upper, storesScanLen, seqs[:0])
		res.scan[k] = time.Since(t)
		if err != nil {
			return res, err
		}
		res.scanKeys += len(got)
	}
	runtime.GC()
	debug.FreeOSMemory()
	runtime.ReadMemStats(&mstats)
	res.heapInuse = mstats.HeapInuse
	res.rss, res.rssAnon, res.rssFile = procStatus("VmRSS"), procStatus("RssAnon"), procStatus("RssFile")
	if st := s.stats(); st != "" {
		fmt.Printf("   %s: %s\n", engine, st)
	}

	// Cold: the store closed, its files written and dropped from the OS's
	// page cache, reopened; misses first, then hits (and again with DB.Get).
	coldReopen := func() (time.Duration, error) {
		if err := s.close(); err != nil {
			return 0, err
		}
		if err := dropDirCache(dir); err != nil {
			res.coldSkipped = err.Error()
			return 0, nil
		}
		t := time.Now()
		err := s.open(dir)
		return time.Since(t), err
	}
	if res.coldReopen, err = coldReopen(); err != nil || res.coldSkipped != "" {
		return res, err
	}
	if res.coldMiss, err = storesGetRun(s.get, rng, n, storesColdGets, storesMissSeed, &res.missWrong); err != nil {
		return res, err
	}
	if res.coldHit, err = storesGetRun(s.get, rng, n, storesColdGets, storesSeed, &res.hitWrong); err != nil {
		return res, err
	}
	if hasPlain {
		if _, err = coldReopen(); err != nil || res.coldSkipped != "" {
			return res, err
		}
		if res.plainColdMiss, err = storesGetRun(plain.getPlain, rng, n, storesColdGets, storesMissSeed, &res.missWrong); err != nil {
			return res, err
		}
		if res.plainColdHit, err = storesGetRun(plain.getPlain, rng, n, storesColdGets, storesSeed, &res.hitWrong); err != nil {
			return res, err
		}
	}
	return res, nil
}

// plainGetter is a store with a second way of looking a key up (Pebble's
// DB.Get), measured beside its get.
type plainGetter interface {
	getPlain(key, into []byte) ([]byte, bool, error)
}

// storesGetRun times count point gets of random keys made with seed
// (storesSeed: written; storesMissSeed: never written) and counts the
// answers that are wrong into wrong.
func storesGetRun(get func(key, into []byte) ([]byte, bool, error), rng *rand.Rand, n uint64, count int, seed uint64, wrong *int) ([]time.Duration, error) {
	var key, val []byte
	out := make([]time.Duration, count)
	for k := range out {
		key = appendCorrKey(key[:0], rng.Uint64N(n), seed)
		t := time.Now()
		v, ok, err := get(key, val[:0])
		out[k] = time.Since(t)
		if err != nil {
			return out, err
		}
		val = v
		if hit := seed == storesSeed; ok != hit || hit && !bytes.HasPrefix(v, []byte(`{"commandId":"cmd-`)) {
			*wrong++
		}
	}
	return out, nil
}

// dropDirCache drops every file under dir from the OS's page cache.
func dropDirCache(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return dropFileCache(path)
	})
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func storesReport(o storesOptions, r storesResult, rep *report) {
	e := r.engine
	p := "stores." + e + "."
	// lat adds the p50 and p99 of d as name.p50_us and name.p99_us and
	// returns them.
	lat := func(name string, d []time.Duration) []time.Duration {
		q := percentiles(d, 0.5, 0.99)
		rep.add(p+name+".p50_us", us(q[0]), "us")
		rep.add(p+name+".p99_us", us(q[1]), "us")
		return q
	}
	rep.add(p+"write.events_per_s", float64(o.records)/r.write.Seconds(), "events/s")
	rep.add(p+"write.keys_per_s", float64(r.keys)/r.write.Seconds(), "keys/s")
	hit, miss, scan := lat("hit", r.hit), lat("miss", r.miss), lat("scan", r.scan)
	rep.add(p+"heap_inuse_mib", mib(int64(r.heapInuse)), "MiB")
	rep.add(p+"rss_mib", mib(r.rss), "MiB")
	rep.add(p+"rss_anon_mib", mib(r.rssAnon), "MiB")
	rep.add(p+"rss_file_mib", mib(r.rssFile), "MiB")
	rep.add(p+"rss_start_mib", mib(r.rssStart), "MiB")
	rep.add(p+"disk_mib", mib(r.disk), "MiB")
	rep.add(p+"reopen_ms", ms(r.reopen), "ms")
	fmt.Printf("   %s: reopened in %.1f ms; get hit p50 %.1f µs p99 %.1f µs, miss p50 %.1f µs p99 %.1f µs; scan of %d keys p50 %.0f µs p99 %.0f µs (%.0f keys a scan)\n",
		e, ms(r.reopen), us(hit[0]), us(hit[1]), us(miss[0]), us(miss[1]), storesScanLen, us(scan[0]), us(scan[1]), float64(r.scanKeys)/float64(len(r.scan)))
	if r.plainHit != nil {
		ph, pm := lat("dbget.hit", r.plainHit), lat("dbget.miss", r.plainMiss)
		fmt.Printf("   %s: with DB.Get instead (no L6 filters): hit p50 %.1f µs p99 %.1f µs, miss p50 %.1f µs p99 %.1f µs\n",
			e, us(ph[0]), us(ph[1]), us(pm[0]), us(pm[1]))
	}
	fmt.Printf("   %s: after the reads: Go heap in use %.0f MiB, RSS %.0f MiB (anonymous %.0f, file-backed %.0f); before the first open: RSS %.0f MiB (file-backed %.0f: the program's own pages); at the end of the writes: heap %.0f MiB, RSS %.0f MiB\n",
		e, mib(int64(r.heapInuse)), mib(r.rss), mib(r.rssAnon), mib(r.rssFile), mib(r.rssStart), mib(r.rssFileStart), mib(r.writeHeapInuse), mib(r.writeRSS))
	rep.row(fmt.Sprintf("%s, %d events: events/s written; get hit / miss p99 µs; scan p99 µs", e, o.records),
		fmt.Sprintf("%.0f; %.1f / %.1f; %.0f", float64(o.records)/r.write.Seconds(), us(hit[1]), us(miss[1]), us(scan[1])), "", "")
	rep.row(fmt.Sprintf("%s: heap / RSS MiB after the reads; disk MiB; reopen ms", e),
		fmt.Sprintf("%.0f / %.0f; %.0f; %.1f", mib(int64(r.heapInuse)), mib(r.rss), mib(r.disk), ms(r.reopen)), "", "")
	if r.coldSkipped != "" {
		fmt.Printf("   %s: cold gets skipped: %s\n", e, r.coldSkipped)
	} else {
		rep.add(p+"cold.reopen_ms", ms(r.coldReopen), "ms")
		cm, ch := lat("cold.miss", r.coldMiss), lat("cold.hit", r.coldHit)
		fmt.Printf("   %s: cold (files dropped from the page cache, reopened in %.1f ms): %d misses p50 %.1f µs p99 %.1f µs, then %d hits p50 %.1f µs p99 %.1f µs\n",
			e, ms(r.coldReopen), len(r.coldMiss), us(cm[0]), us(cm[1]), len(r.coldHit), us(ch[0]), us(ch[1]))
		rep.row(fmt.Sprintf("%s, cold: get miss / hit p99 µs", e), fmt.Sprintf("%.1f / %.1f", us(cm[1]), us(ch[1])), "", "")
		if r.plainColdMiss != nil {
			pm, ph := lat("cold.dbget.miss", r.plainColdMiss), lat("cold.dbget.hit", r.plainColdHit)
			fmt.Printf("   %s: cold again, with DB.Get: %d misses p50 %.1f µs p99 %.1f µs, then %d hits p50 %.1f µs p99 %.1f µs\n",
				e, len(r.plainColdMiss), us(pm[0]), us(pm[1]), len(r.plainColdHit), us(ph[0]), us(ph[1]))
		}
	}
	if r.hitWrong > 0 || r.missWrong > 0 {
		fmt.Printf("   !! %s: %d hits not found, %d misses found\n", e, r.hitWrong, r.missWrong)
		rep.figures = append(rep.figures, figure{Figure: p + "wrong_answers", Value: float64(r.hitWrong + r.missWrong), Unit: "lookups",
			Note: fmt.Sprintf("%d hits not found, %d misses found", r.hitWrong, r.missWrong)})
	}
	fmt.Println()
}

// dirSize is the size of the files under dir.
func dirSize(dir string) (int64, error) {
	n, _, err := dirFiles(dir, "")
	return n, err
}

// dirFiles returns the bytes of the files under dir and how many of them
// have a name ending in suffix ("": all).
func dirFiles(dir, suffix string) (bytes int64, files int, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		bytes += info.Size()
		if strings.HasSuffix(d.Name(), suffix) {
			files++
		}
		return nil
	})
	return bytes, files, err
}

// pebbleStore: one key space (the models' keys differ in their first
// bytes), a 64 MiB block cache, 8 MiB memtables, bloom filters of 10 bits
// a key at every level, the newest format; batches committed with NoSync
// (written to the WAL, not synced).
type pebbleStore struct {
	db *pebble.DB
}

func (p *pebbleStore) describe() string {
	return fmt.Sprintf("pebble/v2 v2.1.7, block cache %d MiB (pebble.NewCache), memtables of %d MiB (at most 2 queued), bloom filters 10 bits/key on every level, FormatNewest, batches committed with pebble.NoSync",
		storesCacheBytes>>20, storesMemtable>>20)
}

func (p *pebbleStore) open(dir string) error {
	cache := pebble.NewCache(storesCacheBytes)
	defer cache.Unref() // the DB holds its own reference
	opts := &pebble.Options{
		Cache:              cache,
		MemTableSize:       storesMemtable,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             quietPebbleLogger{},
	}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return err
	}
	p.db = db
	return nil
}

func (p *pebbleStore) apply(b *storesBatchBuf) error {
	wb := p.db.NewBatch()
	defer wb.Close()
	if err := b.each(func(_ storeKind, k, v []byte) error { return wb.Set(k, v, nil) }); err != nil {
		return err
	}
	return wb.Commit(pebble.NoSync)
}

// settle flushes the memtable and waits until no flush or compaction has
// run for 200 ms: the write rate is then one the store can keep up with,
// and the reads meet no compaction left over from the writes.
func (p *pebbleStore) settle() error {
	if err := p.db.Flush(); err != nil {
		return err
	}
	idle := time.Time{}
	for {
		m := p.db.Metrics()
		if m.Compact.NumInProgress > 0 || m.Flush.NumInProgress > 0 {
			idle = time.Time{}
		} else if idle.IsZero() {
			idle = time.Now()
		} else if time.Since(idle) >= 200*time.Millisecond {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// get looks the key up the way Pebble documents for many lookups that
// mostly find nothing: an iterator with UseL6Filters and SeekPrefixGE, so
// that the bloom filters of the last level are read too (Get leaves them
// out: a table there is large and a key looked up there is usually found).
func (p *pebbleStore) get(key, into []byte) ([]byte, bool, error) {
	it, err := p.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return into, false, err
	}
	found := false
	if it.SeekPrefixGE(key) && bytes.Equal(it.Key(), key) {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return into, false, err
		}
		into, found = append(into, v...), true
	}
	return into, found, it.Close()
}

// getPlain is DB.Get.
func (p *pebbleStore) getPlain(key, into []byte) ([]byte, bool, error) {
	v, closer, err := p.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return into, false, nil
	}
	if err != nil {
		return into, false, err
	}
	into = append(into, v...)
	return into, true, closer.Close()
}

func (p *pebbleStore) scan(lower, upper []byte, n int, into []uint64) ([]uint64, error) {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return into, err
	}
	for ok := it.First(); ok && len(into) < n; ok = it.Next() {
		k := it.Key()
		into = append(into, binary.BigEndian.Uint64(k[len(k)-8:]))
	}
	return into, it.Close()
}

func (p *pebbleStore) close() error {
	if p.db == nil {
		return nil
	}
	err := p.db.Close()
	p.db = nil
	return err
}

func (p *pebbleStore) stats() string {
	m := p.db.Metrics()
	var levels []string
	for i, l := range m.Levels {
		if l.TablesCount > 0 {
			levels = append(levels, fmt.Sprintf("L%d %d", i, l.TablesCount))
		}
	}
	return fmt.Sprintf("block cache %.0f MiB in use, hit rate %.1f %%; bloom filters spared %d reads of %d (%.1f %%); memtables %.0f MiB; tables %s",
		mib(m.BlockCache.Size), 100*float64(m.BlockCache.Hits)/float64(max(m.BlockCache.Hits+m.BlockCache.Misses, 1)),
		m.Filter.Hits, m.Filter.Hits+m.Filter.Misses, 100*float64(m.Filter.Hits)/float64(max(m.Filter.Hits+m.Filter.Misses, 1)),
		mib(int64(m.MemTable.Size)), strings.Join(levels, ", ")) + cgoLine(m.String())
}

// cgoLine is what Pebble's metrics say of the memory it allocated itself
// (outside the Go heap), or "".
func cgoLine(metrics string) string {
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "Cgo memory usage:") {
			return "; " + strings.TrimSpace(line)
		}
	}
	return ""
}

// quietPebbleLogger drops Pebble's informational lines.
type quietPebbleLogger struct{}

func (quietPebbleLogger) Infof(string, ...any) {}
func (quietPebbleLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}
func (quietPebbleLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
	os.Exit(1)
}

// boltStore: a bucket per model; a transaction per batch with NoSync (the
// commit writes the pages but does not fsync), the hashmap freelist, which
// is still written at each commit so that a reopen need not scan the file;
// the type index's bucket splits pages at 90 % (its keys are appended).
// bbolt reads through a read-only mmap of the whole file: the pages it
// touches are the OS's page cache, counted in the process's RSS
// (file-backed), and no setting bounds them.
type boltStore struct {
	db *bolt.DB
}

var boltBuckets = [...][]byte{kindCorrelation: []byte("corr"), kindType: []byte("type"), kindMeta: []byte("meta")}

func (s *boltStore) describe() string {
	return "bbolt v1.5.0, NoSync, a read-write transaction per batch, hashmap freelist (synced), FillPercent 0.9 for the type index; reads through its mmap, not bounded by any setting"
}

func (s *boltStore) open(dir string) error {
	db, err := bolt.Open(filepath.Join(dir, "stores.db"), 0o600, &bolt.Options{
		Timeout:      time.Second,
		NoSync:       true,
		FreelistType: bolt.FreelistMapType,
	})
	if err != nil {
		return err
	}
	s.db = db
	return db.Update(func(tx *bolt.Tx) error {
		for _, name := range boltBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) apply(b *storesBatchBuf) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		var buckets [len(boltBuckets)]*bolt.Bucket
		for i, name := range boltBuckets {
			buckets[i] = tx.Bucket(name)
		}
		buckets[kindType].FillPercent = 0.9
		return b.each(func(kind storeKind, k, v []byte) error { return buckets[kind].Put(k, v) })
	})
}

// settle has nothing to wait for: a commit leaves no work behind (the
// kernel writes the pages back in its own time, as it does Pebble's WAL).
func (s *boltStore) settle() error { return nil }

func (s *boltStore) get(key, into []byte) ([]byte, bool, error) {
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(boltBuckets[kindCorrelation]).Get(key); v != nil {
			into, found = append(into, v...), true
		}
		return nil
	})
	return into, found, err
}

func (s *boltStore) scan(lower, upper []byte, n int, into []uint64) ([]uint64, error) {
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(boltBuckets[kindType]).Cursor()
		for k, _ := c.Seek(lower); k != nil && bytes.Compare(k, upper) < 0 && len(into) < n; k, _ = c.Next() {
			into = append(into, binary.BigEndian.Uint64(k[len(k)-8:]))
		}
		return nil
	})
	return into, err
}

func (s *boltStore) close() error {
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	return err
}

func (s *boltStore) stats() string { return "" }
