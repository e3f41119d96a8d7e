package main

import (
	"fmt"
	"runtime"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
)

// memoryResult is what stored commands keep in the memory of agentbus's
// process (the embedded nats-server's included) after their messages have
// left the block caches, per command: while their ids are in the duplicate
// windows, and for good.
type memoryResult struct {
	N                  int
	DupWindow          time.Duration
	PerID              float64 // bytes per command
	PerAggregate       float64 // bytes per command that started a new aggregate
	Base, Full, NoDups int64   // live heap, bytes
	Logs               string
	TotalTime          time.Duration
}

// blockCacheExpiry is a little more than nats-server's file store keeps a
// message block's cache after its last use (10 s).
const blockCacheExpiry = 12 * time.Second

// runMemory submits n PlaceOrder commands (each a new order), waits until
// every one is visible, and reads the live heap (after a full collection)
// at three points: before; once the block caches expired; and once the
// duplicate window passed. The differences, divided by n, are what one
// command costs in the windows and after them. The duplicate window is
// set for the run, long enough to count every id and no longer; what an
// id costs does not depend on it.
func runMemory(verbose bool, n int, dupWindow time.Duration) (memoryResult, error) {
	t0 := time.Now()
	res := memoryResult{N: n, DupWindow: dupWindow}
	ab, err := startAgentbus(verbose, func(c *settings.Config) { c.Streams.DuplicateWindow = settings.Duration(dupWindow) })
	if err != nil {
		return res, err
	}
	defer ab.Stop()
	client := newClient(16)
	defer client.CloseIdleConnections()
	// Warm up connections, pools and the processor with a few commands
	// (their ids, still in the base figure, are 0.4 % of n's).
	if _, err := submitAndWait(ab, client, "mw", 200); err != nil {
		return res, err
	}
	time.Sleep(blockCacheExpiry)
	res.Base = liveHeap()
	began := time.Now()
	if _, err := submitAndWait(ab, client, "mem", n); err != nil {
		return res, err
	}
	stored := time.Now()
	time.Sleep(blockCacheExpiry)
	res.Full = liveHeap()
	if time.Since(began) > dupWindow {
		return res, fmt.Errorf("the first ids left the %s duplicate window before they were counted: a longer window is needed", dupWindow)
	}
	// nats-server drops each id as it leaves the window.
	time.Sleep(time.Until(stored.Add(dupWindow + 2*time.Second)))
	res.NoDups = liveHeap()
	res.PerID = float64(res.Full-res.NoDups) / float64(n)
	res.PerAggregate = float64(res.NoDups-res.Base) / float64(n)
	res.Logs = ab.logs()
	res.TotalTime = time.Since(t0)
	return res, nil
}

// liveHeap is the heap in use after two full collections.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
