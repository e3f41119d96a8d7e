package server

import (
	"os"
	"runtime"
	"sync"
)

// gcTunerOnce keeps a second TuneRuntime from starting a second tuner.
var gcTunerOnce sync.Once

// TuneRuntime sets the Go runtime the way agentbus runs best, each setting
// only where the environment (GOGC, GOMAXPROCS) does not choose it:
//
//   - GOGC that puts the heap goal at 2 GiB or a quarter of memory, never
//     below 400 (gctuner.go): agentbus's garbage is short-lived and its live
//     heap small (tens of MB in a burst of load; hundreds under sustained
//     load, where the floor of 400 applies), and each collection on a busy
//     box is a burst of CPU that the commands behind it wait for; fewer
//     collections, fewer bursts.
//
//   - GOMAXPROCS one more than the CPUs, where Go uses every CPU of the
//     machine: the embedded nats-server, the processor and HTTP share the
//     process, and a thread held up (a page fault, a mark assist, a file
//     write) no longer holds up half of the runnable goroutines on a 2-core
//     box. At 5,000 commands/s on 2 cores, more threads than CPUs halved the
//     command -> event p50; of 3 and 4, 3 had the lower p99 and the lower
//     p50 in 9 of 12 interleaved pairs of stages, and spent less CPU
//     spinning (docs/decisions.md).
//
//     Under a CPU limit below the machine's CPUs at start (a container's
//     quota, which Go follows) it is left alone: threads beyond the quota
//     would be throttled. Once set here, Go no longer follows a limit
//     that changes later; set GOMAXPROCS in the environment to choose.
func TuneRuntime() {
	if os.Getenv("GOGC") == "" {
		gcTunerOnce.Do(func() { startGCTuner(gcHeapCap()) })
	}
	if n := runtime.GOMAXPROCS(0); os.Getenv("GOMAXPROCS") == "" && n == runtime.NumCPU() {
		runtime.GOMAXPROCS(n + 1)
	}
}
