package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSample is a point-in-time reading of the machine's and this process's
// CPU time, to tell how busy the machine was during a run and how much of
// that was someone else (other processes share this machine).
type cpuSample struct {
	at            time.Time
	busy, total   uint64 // /proc/stat jiffies, all CPUs
	ownUser, ownS time.Duration
	alloc, gcs    uint64 // this process's heap bytes allocated and collections, so far
}

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, v := range f[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			if i >= 8 { // guest, guest_nice are already in user
				break
			}
			s.total += n
			switch i {
			case 3, 4: // idle, iowait
			default:
				s.busy += n
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.ownUser = time.Duration(ru.Utime.Nano())
		s.ownS = time.Duration(ru.Stime.Nano())
	}
	c := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(c)
	s.alloc, s.gcs = c[0].Value.Uint64(), c[1].Value.Uint64()
	return s
}

// cpuUse is CPU use over an interval, in cores, and this process's heap
// allocation (bytes) and garbage collections in it.
type cpuUse struct {
	Own, Machine float64
	Alloc, GCs   uint64
}

func cpuBetween(a, b cpuSample, ncpu int) cpuUse {
	wall := b.at.Sub(a.at).Seconds()
	var u cpuUse
	if wall <= 0 {
		return u
	}
	u.Own = (b.ownUser + b.ownS - a.ownUser - a.ownS).Seconds() / wall
	u.Alloc, u.GCs = b.alloc-a.alloc, b.gcs-a.gcs
	if dt := b.total - a.total; dt > 0 {
		u.Machine = float64(b.busy-a.busy) / float64(dt) * float64(ncpu)
	}
	return u
}

// Others is the CPU used by other processes, in cores.
func (u cpuUse) Others() float64 { return max(u.Machine-u.Own, 0) }

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// quietBudget is how long, in total, the bench may still wait for other
// processes to calm down (-quiet-wait).
var quietBudget time.Duration

// waitQuiet waits, within quietBudget, until other processes use less than
// a quarter of a core over half a second, and says so when it waited or
// gave up. The machine may be shared; the per-run "others" column shows how
// much it was.
func waitQuiet() {
	start := time.Now()
	for {
		a := sampleCPU()
		time.Sleep(500 * time.Millisecond)
		u := cpuBetween(a, sampleCPU(), runtime.NumCPU())
		waited := time.Since(start)
		if u.Others() < 0.25 {
			if waited > time.Second {
				fmt.Printf("   (waited %s for other processes to go quiet)\n", waited.Round(100*time.Millisecond))
			}
			quietBudget -= waited
			return
		}
		if waited >= quietBudget {
			fmt.Printf("   (machine busy: other processes use %.2f cores; measuring anyway)\n", u.Others())
			quietBudget = 0
			return
		}
	}
}
