package host

import (
	"bufio"
	"bytes"
	"log/slog"
	"path"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The collector's pacing in large-heap mode (memory.mode), while GOGC is
// agentbus's to choose (TuneRuntime).
//
// A collection on a busy box is a burst: its marking takes tens of
// milliseconds of CPU from requests that were already using most of it, and
// the commands queued behind it are the tail of command -> event latency.
// Fewer collections are fewer bursts, so GOGC puts the heap goal at the
// cap — the budget (2 GiB by default), or a quarter of the memory there
// is — whatever the live heap, but never below gcPercentMin: a large live
// heap is collected no more often than at a goal of 5 × it. While the live
// heap is small that is a collection every 2 GiB allocated, so a burst of
// load meets few; each collection costs what it did. The measurements:
// docs/decisions.md, "Fewer garbage collections".
const (
	gcPercentMin = 400
	gcMemoryPart = 4 // the heap goal is at most a quarter of the memory there is
	// goMinHeap is Go's least heap goal at GOGC 100 (the runtime's
	// defaultHeapMinimum): the goal is never below goMinHeap × GOGC/100,
	// whatever the live heap, so GOGC may not go past 100 × cap /
	// goMinHeap.
	goMinHeap = 4 << 20
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
	t := &gcTuner{cap: heapCap, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}}
	t.afterGC()
	return t
}

// percentFor is the GOGC that puts the heap goal at the cap, in steps of
// 100 so that a live heap moving a little does not change it, and never
// below gcPercentMin. Go's goal is live + (live + stacks + globals) ×
// GOGC/100, so the stacks of many goroutines count too, and at least
// goMinHeap × GOGC/100, which bounds GOGC for a heap of almost nothing
// (at start, before the first collection).
func (t *gcTuner) percentFor(live, stacks, globals uint64) int {
	most := t.cap / goMinHeap // hundreds of GOGC
	if base := live + stacks + globals; base > 0 {
		most = min(most, (t.cap-min(live, t.cap))/base)
	}
	return max(int(most)*100, gcPercentMin)
}

// afterGC runs once a collection is done (a cleanup of an object allocated
// only to be collected), sets GOGC when it should change, and arms itself
// for the next collection.
func (t *gcTuner) afterGC() {
	if t.stopped.Load() {
		return
	}
	metrics.Read(t.sample)
	if p := t.percentFor(t.sample[0].Value.Uint64(), t.sample[1].Value.Uint64(), t.sample[2].Value.Uint64()); p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
	runtime.AddCleanup(new(gcSentinel), (*gcTuner).afterGC, t)
}

// gcSentinel is larger than the tiny allocator's 16 bytes, whose objects
// share a block and may never be collected alone.
type gcSentinel struct{ _ [32]byte }

// budgetWatch warns when a collection finds the live heap past three
// quarters of the soft memory limit, at most every budgetWarnEvery: past
// it the collector runs ever more often to stay under the limit (up to
// half the CPU), and memory.budget should be raised.
type budgetWatch struct {
	limit  uint64
	log    *slog.Logger
	last   time.Time
	sample []metrics.Sample
}

const budgetWarnEvery = 10 * time.Minute

// startBudgetWatch watches the live heap after every collection, for the
// life of the process.
func startBudgetWatch(limit uint64, log *slog.Logger) {
	w := &budgetWatch{limit: limit, log: log, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	w.afterGC()
}

func (w *budgetWatch) afterGC() {
	metrics.Read(w.sample)
	if live := w.sample[0].Value.Uint64(); live > w.limit/4*3 && time.Since(w.last) >= budgetWarnEvery {
		w.last = time.Now()
		w.log.Warn("the live heap is close to the memory budget: collections run ever more often to stay under it; raise memory.budget (or the container's memory limit)",
			"liveMiB", live>>20, "limitMiB", w.limit>>20)
	}
	runtime.AddCleanup(new(gcSentinel), (*budgetWatch).afterGC, w)
}

// memoryAvailable is the smallest of the machine's memory (0: unknown) and
// the memory limits of the process's cgroup and its parents (cgroup v2,
// else v1's hierarchical limit); unknownMemory when none is known.
func memoryAvailable(read func(string) ([]byte, error), machine uint64) uint64 {
	avail, known := uint64(0), false
	take := func(n uint64) {
		if n > 0 && n < 1<<60 && (!known || n < avail) { // v1 says "unlimited" with a huge number
			avail, known = n, true
		}
	}
	for _, f := range cgroupLimitFiles(read) {
		if b, err := read(f); err == nil {
			if n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64); err == nil { // v2 says "max"
				take(n)
			}
		}
	}
	if b, err := read("/sys/fs/cgroup/memory/memory.stat"); err == nil {
		take(statField(b, "hierarchical_memory_limit"))
	}
	take(machine)
	if !known {
		return unknownMemory
	}
	return avail
}

// unknownMemory is the memory assumed when none is known.
const unknownMemory = 8 << 30

// cgroupLimitFiles lists the files that may hold a memory limit on the
// process: memory.max of its cgroup v2 and of each parent (from
// /proc/self/cgroup; the root is where a container's namespace puts its
// own), and cgroup v1's limit (its limit with the parents' is read from
// memory.stat).
func cgroupLimitFiles(read func(string) ([]byte, error)) []string {
	files := []string{"/sys/fs/cgroup/memory.max"}
	if b, err := read("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			dir, ok := strings.CutPrefix(line, "0::")
			if !ok || !strings.HasPrefix(dir, "/") || strings.Contains(dir, "..") {
				continue
			}
			for dir = path.Clean(dir); dir != "/"; dir = path.Dir(dir) {
				files = append(files, "/sys/fs/cgroup"+dir+"/memory.max")
			}
		}
	}
	return append(files, "/sys/fs/cgroup/memory/memory.limit_in_bytes")
}

// statField is the number after name on the line of b that starts with
// it ("hierarchical_memory_limit 123" in memory.stat); 0 when absent.
func statField(b []byte, name string) uint64 {
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) != 2 || f[0] != name {
			continue
		}
		if n, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			return n
		}
	}
	return 0
}
