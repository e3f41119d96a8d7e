package abuse_test

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const edgeMiB = 1 << 20

// TestEdgeHeaderFloodMemory: hundreds of requests that each send most of a
// megabyte of header and never finish cost agentbus little memory while
// they last (each is refused 431 past the header limit).
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
}
