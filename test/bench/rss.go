package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/server/host"
	"github.com/agentbus/agentbus/pkg/settings"
)

// The rss stage runs in two processes, one per memory mode (runIsolated),
// each submitting the same commands to a fresh agentbus, and reports the
// process's resident memory: its peak, once every command is visible, and
// after a rest. A whole bench prints the two side by side.

// rssModes are the modes the rss stage runs in, in order.
var rssModes = []string{settings.MemoryBudget, settings.MemoryLargeHeap}

// rssRest is how long the stage waits, idle, before its last reading.
const rssRest = 10 * time.Second

func rssStage(o options, rep *report) error {
	fmt.Printf("6. Resident memory by memory mode: %d commands over %d connections as fast as accepted (as stage 2a), in memory mode %s\n",
		o.rssN, o.conns, o.memory)
	fmt.Printf("   (%s); RSS of the whole process (load generator and embedded nats-server included)\n", planText(plan))
	waitQuiet()
	before := procStatus("VmRSS")
	ab, err := startAgentbus(o.verbose)
	if err != nil {
		return err
	}
	r, err := runCapacity(ab, o.rssN, o.conns)
	if err != nil {
		ab.Stop()
		return err
	}
	loaded := procStatus("VmRSS")
	time.Sleep(rssRest)
	rested := procStatus("VmRSS")
	peak := procStatus("VmHWM")
	ab.Stop()
	if r.Errors > 0 || r.NotVisible > 0 {
		fmt.Printf("   !! errors %d, not visible %d, first: %s\n", r.Errors, r.NotVisible, r.FirstErr)
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Printf("   %-10s RSS MiB: before %.0f, peak %.0f, all visible %.0f, after %s idle %.0f  (%.0f commands/s end to end)\n\n",
		o.memory, mib(before), mib(peak), mib(loaded), rssRest, mib(rested), r.Rate)
	key := strings.ReplaceAll(o.memory, "-", "_")
	rep.add("rss."+key+".peak", mib(peak), "MiB")
	rep.add("rss."+key+".loaded", mib(loaded), "MiB")
	rep.add("rss."+key+".rested", mib(rested), "MiB")
	rep.row(fmt.Sprintf("RSS MiB after %d commands, %s: peak / all visible / rested", o.rssN, o.memory),
		fmt.Sprintf("%.0f / %.0f / %.0f", mib(peak), mib(loaded), mib(rested)), "", "")
	return nil
}

// planText describes a memory plan.
func planText(p host.RuntimePlan) string {
	s := fmt.Sprintf("memory limit %s", mibText(p.Limit))
	if p.HeapGoal > 0 {
		s += fmt.Sprintf(", heap goal %s", mibText(p.HeapGoal))
	}
	return s + fmt.Sprintf(", %s available", mibText(p.Available))
}

func mibText(b uint64) string {
	if b == 0 {
		return "from the environment"
	}
	return fmt.Sprintf("%d MiB", b>>20)
}

// procStatus is a memory field of /proc/self/status in bytes ("VmRSS",
// "VmHWM"), 0 where there is none.
func procStatus(field string) int64 { return procStatusOf("self", field) }

// procStatusOf is a memory field of /proc/PID/status in bytes, 0 where
// there is none; pid is a process id or "self".
func procStatusOf(pid, field string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}
