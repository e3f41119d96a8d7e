package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// delayProxy forwards TCP connections from a loopback listener to one
// target address and holds every chunk it reads, in each direction, for
// oneWay before writing it on: a request and its response each pass it
// once, so a round trip gains twice oneWay, as the links between zones add
// to every round trip between a client and an R3 cluster's leader.
//
// Each direction of a connection is a queue: its reader stamps each chunk
// with its release time (read time + oneWay) and queues it; its writer
// writes the chunks in the order read, each once its time has come. The
// delay is latency, not bandwidth: chunks read while others wait are
// queued behind them, and a writer waits only for the head of its queue
// (release times only grow), so throughput is the direct path's. No chunk
// is written before its release time; a writer sleeps in the kernel
// (sleepExactly), and how late a chunk is written beyond its time (timer
// slack, a busy CPU) is counted.
//
// Close stops the listener and every connection; delayProxy is safe for
// concurrent use.
type delayProxy struct {
	ln     net.Listener
	target string
	oneWay time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	chunks   atomic.Int64 // chunks written
	lateSum  atomic.Int64 // nanoseconds written after their release time, summed
	lateMax  atomic.Int64
	heldSums atomic.Int64 // nanoseconds from read to written, summed
}

// proxyChunk is what a direction's reader hands its writer.
type proxyChunk struct {
	buf     *[]byte
	n       int
	read    time.Time
	release time.Time
}

// proxyQueue is how many chunks a direction holds before its reader
// waits; proxyChunkSize is the most one read takes.
const (
	proxyQueue     = 512
	proxyChunkSize = 32 << 10
)

var proxyBufs = sync.Pool{New: func() any { b := make([]byte, proxyChunkSize); return &b }}

// startDelayProxy listens on a free loopback port and forwards to target
// (host:port) with oneWay added to each direction.
func startDelayProxy(target string, oneWay time.Duration) (*delayProxy, error) {
	if oneWay < 0 {
		return nil, fmt.Errorf("delay proxy: negative delay %s", oneWay)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, target: target, oneWay: oneWay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for their
// goroutines.
func (p *delayProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// proxyStats is what the proxy measured of the delays it applied.
type proxyStats struct {
	Chunks   int64
	MeanHeld time.Duration // from read to written, one way
	MeanLate time.Duration // written after the release time
	MaxLate  time.Duration
}

// Stats returns the delays applied so far.
func (p *delayProxy) Stats() proxyStats {
	n := p.chunks.Load()
	s := proxyStats{Chunks: n, MaxLate: time.Duration(p.lateMax.Load())}
	if n > 0 {
		s.MeanHeld = time.Duration(p.heldSums.Load() / n)
		s.MeanLate = time.Duration(p.lateSum.Load() / n)
	}
	return s
}

// track registers c, or reports false (and closes c) once the proxy is closed.
func (p *delayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *delayProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(in) {
			return
		}
		p.wg.Add(1)
		go p.serve(in)
	}
}

// serve connects in to the target and runs both directions until either
// side ends.
func (p *delayProxy) serve(in net.Conn) {
	defer p.wg.Done()
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.untrack(in)
		return
	}
	if !p.track(out) {
		p.untrack(in)
		return
	}
	for _, c := range []net.Conn{in, out} {
		if t, ok := c.(*net.TCPConn); ok {
			_ = t.SetNoDelay(true)
		}
	}
	var dirs sync.WaitGroup
	dirs.Add(2)
	go func() { defer dirs.Done(); p.pipe(in, out) }()
	go func() { defer dirs.Done(); p.pipe(out, in) }()
	dirs.Wait()
	p.untrack(in, out)
}

// pipe copies src to dst through a delayed queue. When src ends, the
// queued chunks are still written and dst's write side is closed; when dst
// fails, both connections are closed so that the other direction ends too.
func (p *delayProxy) pipe(src, dst net.Conn) {
	q := make(chan proxyChunk, proxyQueue)
	done := make(chan struct{})
	go func() {
		defer close(done)
		failed := false
		for c := range q {
			if !failed {
				if d := time.Until(c.release); d > 0 {
					sleepExactly(d)
				}
				_, err := dst.Write((*c.buf)[:c.n])
				now := time.Now()
				p.count(now.Sub(c.read), now.Sub(c.release))
				if err != nil {
					failed = true
					src.Close()
					dst.Close()
				}
			}
			proxyBufs.Put(c.buf)
		}
		if t, ok := dst.(*net.TCPConn); ok && !failed {
			_ = t.CloseWrite()
		}
	}()
	for {
		buf := proxyBufs.Get().(*[]byte)
		n, err := src.Read(*buf)
		if n > 0 {
			now := time.Now()
			q <- proxyChunk{buf: buf, n: n, read: now, release: now.Add(p.oneWay)}
		} else {
			proxyBufs.Put(buf)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				dst.Close() // the other direction ends too
			}
			break
		}
	}
	close(q)
	<-done
}

func (p *delayProxy) count(held, late time.Duration) {
	p.chunks.Add(1)
	p.heldSums.Add(int64(held))
	p.lateSum.Add(int64(late))
	for {
		m := p.lateMax.Load()
		if int64(late) <= m || p.lateMax.CompareAndSwap(m, int64(late)) {
			return
		}
	}
}
