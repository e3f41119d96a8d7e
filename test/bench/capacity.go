package main

import (
	"runtime"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
)

// capacityResult is one end-to-end run: n commands submitted as fast as
// the connections allow, timed until every one is visible (its event seen
// in the event log, as the tracker defines it). CPU is this whole process:
// load generator, HTTP, app, and the embedded nats-server.
type capacityResult struct {
	Wall       time.Duration // first send to last visible
	Ingest     time.Duration // first send to last 202
	Rate       float64       // commands fully processed per second
	CPUPerCmd  time.Duration // process CPU time per command
	CPU        cpuUse
	NotVisible int64
	Errors     int64
	FirstErr   string
}

func runCapacity(tg target, n, conns int) (capacityResult, error) {
	var res capacityResult
	corrs := make([]string, n)
	bodies := make([][]byte, n)
	for i := range n {
		corrs[i] = commandCorrelation("cap", i)
		bodies[i] = commandBody("cap", i)
	}
	tr, err := newTracker(tg, corrs, nil)
	if err != nil {
		return res, err
	}
	defer tr.close()
	client := newClient(conns)
	defer client.CloseIdleConnections()
	a := sampleCPU()
	res.Errors, res.FirstErr = postAll(client, tg.url()+"/commands", n, conns, func(i int) []byte { return bodies[i] })
	res.Ingest = time.Since(a.at)
	tr.wait(60 * time.Second)
	b := sampleCPU()
	res.Wall = b.at.Sub(a.at)
	res.CPU = cpuBetween(a, b, runtime.NumCPU())
	res.CPUPerCmd = (b.ownUser + b.ownS - a.ownUser - a.ownS) / time.Duration(n)
	res.Rate = float64(n) / res.Wall.Seconds()
	res.NotVisible = tr.left.Load()
	return res, nil
}

// abCapacity runs the capacity measurement (runCapacity, o.capN commands
// over o.conns connections) against a fresh agentbus with mutate applied;
// with profile set, a CPU profile of the run is written there.
func abCapacity(o options, profile string, mutate ...func(*settings.Config)) (capacityResult, error) {
	ab, err := startAgentbus(o.verbose, mutate...)
	if err != nil {
		return capacityResult{}, err
	}
	var stop func()
	if profile != "" {
		stop = startProfile(profile, 0)
	}
	r, err := runCapacity(ab, o.capN, o.conns)
	if stop != nil {
		stop()
	}
	ab.Stop()
	return r, err
}
