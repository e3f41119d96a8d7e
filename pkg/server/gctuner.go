package server

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
)

// The collector's pacing while GOGC is agentbus's to choose (TuneRuntime).
//
// A collection on a busy box is a burst: its marking takes tens of
// milliseconds of CPU from requests that were already using most of it, and
// the commands queued behind it are the tail of command -> event latency.
// Fewer collections are fewer bursts, so GOGC starts high (the heap may grow
// to 17 times what the last collection kept) and comes down as the live heap
// grows, so that the heap goal stays under gcHeapCap, but never below
// gcPercentMin, the fixed setting before: a large live heap is collected no
// more often than it was. A burst of several seconds at 5,000 commands/s on
// 2 cores then meets at most one collection instead of about four; each
// collection costs what it did (README, Decisions).
const (
	gcPercentMax = 1600
	gcPercentMin = 400
	gcHeapCapMax = 2 << 30 // at most 2 GiB of heap goal ...
	gcMemoryPart = 4       // ... and at most a quarter of the memory there is
)

// gcTuner sets GOGC after every collection from the heap that collection
// found live.
type gcTuner struct {
	cap     uint64 // the heap goal the tuner aims under, bytes
	percent int    // the GOGC it set last
	sample  []metrics.Sample
	stopped atomic.Bool // no more settings after this (tests)
}

// startGCTuner sets GOGC for the heap there is now and again after every
// collection, for the life of the process.
func startGCTuner(heapCap uint64) *gcTuner {
	t := &gcTuner{cap: heapCap, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.afterGC()
	return t
}

// percentFor is the GOGC that puts the heap goal (live × (1 + GOGC/100))
// at the cap, in steps of 100 so that a live heap moving a little does not
// change it, within [gcPercentMin, gcPercentMax].
func (t *gcTuner) percentFor(live uint64) int {
	p := gcPercentMax
	if live > 0 {
		p = int(min((t.cap-min(live, t.cap))/live, gcPercentMax/100)) * 100
	}
	return max(p, gcPercentMin)
}

// afterGC runs once a collection is done (a cleanup of an object allocated
// only to be collected), sets GOGC when it should change, and arms itself
// for the next collection.
func (t *gcTuner) afterGC() {
	if t.stopped.Load() {
		return
	}
	metrics.Read(t.sample)
	if p := t.percentFor(t.sample[0].Value.Uint64()); p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
	runtime.AddCleanup(new(gcSentinel), (*gcTuner).afterGC, t)
}

// gcSentinel is larger than the tiny allocator's 16 bytes, whose objects
// share a block and may never be collected alone.
type gcSentinel struct{ _ [32]byte }

// gcHeapCap is the heap goal the tuner aims under: 2 GiB, or a
// quarter of the memory the process may use (its cgroup's limit, else the
// machine's) when that is less.
func gcHeapCap() uint64 {
	return min(gcHeapCapMax, memoryAvailable(os.ReadFile)/gcMemoryPart)
}

// memoryAvailable reads the cgroup (v2, then v1) memory limit and the
// machine's memory, and returns the smaller; gcHeapCapMax × gcMemoryPart
// when neither reads.
func memoryAvailable(read func(string) ([]byte, error)) uint64 {
	avail := uint64(gcHeapCapMax * gcMemoryPart)
	known := false
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := read(f)
		if err != nil {
			continue
		}
		// "max" (v2) or a huge page-rounded number (v1) when unlimited.
		if n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64); err == nil && n > 0 && n < 1<<60 {
			avail, known = n, true
		}
		break
	}
	if b, err := read("/proc/meminfo"); err == nil {
		if n := memTotal(b); n > 0 && (!known || n < avail) {
			avail = n
		}
	}
	return avail
}

// memTotal is MemTotal from /proc/meminfo, in bytes; 0 when absent.
func memTotal(meminfo []byte) uint64 {
	s := bufio.NewScanner(bytes.NewReader(meminfo))
	for s.Scan() {
		f := bytes.Fields(s.Bytes())
		if len(f) == 3 && string(f[0]) == "MemTotal:" && string(f[2]) == "kB" {
			if n, err := strconv.ParseUint(string(f[1]), 10, 64); err == nil {
				return n << 10
			}
		}
	}
	return 0
}
