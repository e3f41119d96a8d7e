package main

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer answers every byte it reads with the same byte, on a loopback
// port; it stops when the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestDelayProxy: a ping's round trip through the proxy takes at least the
// two one-way delays, and a stream of bytes written in chunks of every
// size comes back through it intact and in order.
func TestDelayProxy(t *testing.T) {
	t.Parallel()
	const oneWay = 500 * time.Microsecond
	p, err := startDelayProxy(echoServer(t), oneWay)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	ping := []byte("PING\r\n")
	got := make([]byte, len(ping))
	for i := range 20 {
		start := time.Now()
		if _, err := c.Write(ping); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		rtt := time.Since(start)
		if !bytes.Equal(got, ping) {
			t.Fatalf("ping %d: got %q", i, got)
		}
		if rtt < 2*oneWay {
			t.Errorf("ping %d: round trip %s, less than the %s added", i, rtt, 2*oneWay)
		}
	}

	// 4 MiB of random bytes in writes of random sizes, read back whole.
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 4<<20)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	writeErr := make(chan error, 1)
	go func() {
		rest := want
		for len(rest) > 0 {
			n := min(len(rest), 1+rng.IntN(64<<10))
			if _, err := c.Write(rest[:n]); err != nil {
				writeErr <- err
				return
			}
			rest = rest[n:]
		}
		writeErr <- nil
	}()
	back := make([]byte, len(want))
	if _, err := io.ReadFull(c, back); err != nil {
		t.Fatal(err)
	}
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, want) {
		i := 0
		for i < len(want) && back[i] == want[i] {
			i++
		}
		t.Fatalf("bytes differ from offset %d of %d", i, len(want))
	}
	if s := p.Stats(); s.Chunks == 0 || s.MeanHeld < oneWay {
		t.Errorf("stats %+v: want chunks held at least %s", s, oneWay)
	}
}
