package host

import (
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/nats-io/nats-server/v2/server/sysmem"
)

// tuneOnce keeps a second TuneRuntime from starting a second tuner or
// watch.
var tuneOnce sync.Once

// RuntimePlan is what TuneRuntime set, in bytes; 0 where the environment
// chose (GOMEMLIMIT, GOGC) or the mode does not set it.
type RuntimePlan struct {
	Mode string
	// Available is the memory the process may use: the smallest memory
	// limit of its cgroup and the cgroup's parents, else the machine's.
	Available uint64
	// Limit is the Go runtime's soft memory limit.
	Limit uint64
	// HeapGoal is the heap goal of large-heap mode.
	HeapGoal   uint64
	GOMAXPROCS int
}

// LogValue lists the plan for the log, in MiB.
func (p RuntimePlan) LogValue() slog.Value {
	mib := func(b uint64) int64 { return int64(b >> 20) }
	return slog.GroupValue(slog.String("mode", p.Mode), slog.Int64("availableMiB", mib(p.Available)),
		slog.Int64("limitMiB", mib(p.Limit)), slog.Int64("heapGoalMiB", mib(p.HeapGoal)), slog.Int("GOMAXPROCS", p.GOMAXPROCS))
}

// TuneRuntime sets the Go runtime for the memory plan m, each setting only
// where the environment (GOMEMLIMIT, GOGC, GOMAXPROCS) does not choose it,
// and returns what it set. Call it once, at the start of a long-running
// process; a second call sets nothing new.
//
//   - budget (memory.mode, the default): the runtime's soft memory limit
//     is the budget (memory.budget, 1 GiB), or three quarters of the
//     memory available when that is less, and GOGC stays Go's: the heap
//     follows the live heap (about twice it), collections make room
//     before the process passes the budget, and memory taken in a burst
//     is given back after it. A collection that finds the live heap past
//     three quarters of the limit is warned of (at most every 10
//     minutes): the collector then runs ever more often, and the budget
//     should be raised.
//
//   - large-heap: GOGC puts the heap goal at the budget (2 GiB unless
//     set) or a quarter of the memory available, whichever is less,
//     whatever the live heap, and never below GOGC 400 (gctuner.go):
//     fewer collections, each a burst of CPU that the commands behind it
//     wait for, at the cost of holding about the heap goal under load.
//     The soft memory limit is three quarters of the memory available, so
//     a container's limit is respected as the live heap grows.
//
//   - GOMAXPROCS one more than the CPUs, where Go uses every CPU of the
//     machine: the embedded nats-server, the processor and HTTP share the
//     process, and a spare thread keeps one held up (a page fault, a mark
//     assist, a file write) from holding up the runnable goroutines behind
//     it. The measurements: docs/decisions.md, "One more Go thread than
//     CPUs".
//
//     Under a CPU limit below the machine's CPUs at start (a container's
//     quota, which Go follows) it is left alone: threads beyond the quota
//     would be throttled. Once set here, Go no longer follows a limit
//     that changes later; set GOMAXPROCS in the environment to choose.
func TuneRuntime(m settings.Memory, log *slog.Logger) RuntimePlan {
	plan := RuntimePlan{Mode: m.Mode, Available: memoryAvailable(os.ReadFile, uint64(max(sysmem.Memory(), 0)))}
	limit, goal := planMemory(m, plan.Available)
	tuneOnce.Do(func() {
		if os.Getenv("GOMEMLIMIT") == "" {
			debug.SetMemoryLimit(int64(min(limit, 1<<62)))
			plan.Limit = limit
			if goal == 0 {
				startBudgetWatch(limit, log)
			}
		}
		if goal > 0 && os.Getenv("GOGC") == "" {
			startGCTuner(goal)
			plan.HeapGoal = goal
		}
	})
	if n := runtime.GOMAXPROCS(0); os.Getenv("GOMAXPROCS") == "" && n == runtime.NumCPU() {
		runtime.GOMAXPROCS(n + 1)
	}
	plan.GOMAXPROCS = runtime.GOMAXPROCS(0)
	return plan
}

// planMemory returns the soft memory limit and, in large-heap mode, the
// heap goal for plan m with avail bytes of memory available (TuneRuntime).
func planMemory(m settings.Memory, avail uint64) (limit, heapGoal uint64) {
	room := avail / 4 * 3
	if m.Mode == settings.MemoryLargeHeap {
		return room, min(m.Bytes(), avail/gcMemoryPart)
	}
	return min(m.Bytes(), room), 0
}
