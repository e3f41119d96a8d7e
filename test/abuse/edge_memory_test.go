package abuse_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
)

const edgeMiB = 1 << 20

// TestEdgeHeaderFloodMemory: hundreds of requests that each send most of a
// megabyte of header and never finish cost agentbus little memory while
// they last (each is refused 431 past the header limit), and what they
// cost is given back after.
func TestEdgeHeaderFloodMemory(t *testing.T) {
	bin := edgeBuild(t)
	p := edgeStart(t, bin, 0, nil)
	before := p.rss()
	stop := make(chan struct{})
	peak := edgeRSSPeak(p, stop)
	pad := bytes.Repeat([]byte("a"), 64<<10)
	const conns, headerBytes = 300, 1<<20 - 16<<10 // under Go's own default of 1 MiB
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	var refused atomic.Int64
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < conns; i += 10 {
				c, err := net.DialTimeout("tcp", p.Addr, 5*time.Second)
				if err != nil {
					continue
				}
				mu.Lock()
				open = append(open, c)
				mu.Unlock()
				_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(c, "GET /events HTTP/1.1\r\nHost: %s\r\nX-Pad: ", p.Addr)
				for sent := 0; sent < headerBytes; sent += len(pad) {
					if _, err := c.Write(pad); err != nil {
						refused.Add(1) // answered and closed: the rest is not read
						break
					}
				}
				// The header is never finished.
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Second)
	mu.Lock()
	for _, c := range open {
		c.Close()
	}
	mu.Unlock()
	close(stop)
	top := <-peak
	t.Logf("RSS before %d MiB, peak %d MiB; %d of %d senders cut off", before/edgeMiB, top/edgeMiB, refused.Load(), conns)
	if grew := top - before; grew > 96*edgeMiB {
		t.Errorf("RSS grew by %d MiB during the flood (from %d MiB): headers are not bounded", grew/edgeMiB, before/edgeMiB)
	}
	deadline := time.Now().Add(30 * time.Second)
	for p.rss()-before > 48*edgeMiB {
		if time.Now().After(deadline) {
			t.Fatalf("RSS %d MiB 30s after the flood, from %d MiB before it", p.rss()/edgeMiB, before/edgeMiB)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestEdgeMemoryByDefault: with the default settings, a stream of commands
// leaves agentbus's resident memory well within the default memory budget
// (the heap follows the live heap), not at the size of a large heap goal.
func TestEdgeMemoryByDefault(t *testing.T) {
	bin := edgeBuild(t)
	p := edgeStart(t, bin, 0, nil)
	const bound = 384 * edgeMiB // well within config.DefaultMemoryBudget (1 GiB)
	stop := make(chan struct{})
	peak := edgeRSSPeak(p, stop)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	const n, workers = 20000, 16
	var failed atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	began := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				body := fmt.Sprintf(`{"specversion":"1.0","id":"mem-%d","source":"edge-memory","type":"PlaceOrder",`+
					`"datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-01T12:00:00Z",`+
					`"data":{"orderId":"mem-%d","customer":"ada","items":[{"sku":"tea","quantity":2}]}}`, i, i)
				status, _, b, err := testkit.Send(client, http.MethodPost, p.URL+"/commands", "application/json", []byte(body))
				if err != nil || status != http.StatusAccepted {
					if failed.Add(1) == 1 {
						first.Store(fmt.Sprintf("%d %v %.200s", status, err, b))
					}
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(2 * time.Second) // the processor catches up
	close(stop)
	top := <-peak
	t.Logf("%d commands in %s; peak RSS %d MiB", n, time.Since(began).Round(time.Millisecond), top/edgeMiB)
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d commands failed, first: %v", f, first.Load())
	}
	if top > bound+64*edgeMiB {
		t.Errorf("peak RSS %d MiB with the defaults, over %d MiB: the heap did not follow the live heap", top/edgeMiB, bound/edgeMiB)
	}
}
