package host

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestConnLimiterTotal: at the cap, the connection idle longest makes room
// for a new one — never one in a request — and when every connection is
// in a request the new one is answered 503 and closed.
func TestConnLimiterTotal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := NewConnLimiter(ln, 3, 0, slog.New(slog.DiscardHandler))
	release := make(chan struct{})
	srv := &http.Server{ConnState: lim.ConnState, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			<-release
		}
	})}
	go func() { _ = srv.Serve(lim) }()
	defer srv.Close()
	defer close(release)
	addr := ln.Addr().String()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	busy := func() net.Conn {
		t.Helper()
		c := dial()
		fmt.Fprintf(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
		return c
	}
	// closed reports whether the server closed c (within a second).
	closed := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	}
	// settle waits until the limiter counts open connections, idle of them.
	settle := func(open, idle int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			lim.mu.Lock()
			n, i := lim.open, lim.idle.Len()
			lim.mu.Unlock()
			if n == open && i == idle {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d connections open, %d idle; want %d, %d", n, i, open, idle)
			}
		}
	}
	a := busy()
	settle(1, 0) // a's request is read: a is in it
	b := dial()
	settle(2, 1)
	c := dial()
	settle(3, 2)
	d := dial() // makes room by closing b, the idle longest
	if !closed(b) {
		t.Fatal("the oldest idle connection was not closed to make room")
	}
	e := dial() // then c
	if !closed(c) {
		t.Fatal("the next oldest idle connection was not closed")
	}
	fmt.Fprintf(d, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
	fmt.Fprintf(e, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
	settle(3, 0)
	f := dial() // all three in requests: refused
	_ = f.SetReadDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(f), nil)
	if err != nil {
		t.Fatalf("a connection past the cap with every connection busy: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" || !res.Close {
		t.Errorf("refusal: %d %v %s", res.StatusCode, res.Header, body)
	}
	if !closed(f) {
		t.Error("the refused connection was left open")
	}
	for _, x := range []net.Conn{a, d, e} {
		_ = x.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := x.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a connection in a request was closed: %v", err)
		}
	}
	settle(3, 0)
}

// TestConnLimiterReleases: every way a connection ends gives its place
// back, once.
func TestConnLimiterReleases(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := NewConnLimiter(ln, 16, 2, slog.New(slog.DiscardHandler))
	srv := &http.Server{ConnState: lim.ConnState, Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	go func() { _ = srv.Serve(lim) }()
	defer srv.Close()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 10 { // more than the address's cap, one after the other
		res, err := client.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		res.Body.Close()
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		lim.mu.Lock()
		open, addrs, idle := lim.open, len(lim.byAddr), lim.idle.Len()
		lim.mu.Unlock()
		if open == 0 && addrs == 0 && idle == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every connection closed: %d open, %d addresses, %d idle", open, addrs, idle)
		}
	}
}

func TestAddrKey(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"127.0.0.1:80", "127.0.0.1"},
		{"[::ffff:10.0.0.1]:80", "10.0.0.1"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:443", "2001:db8:1:2::/64"},
	} {
		a, err := net.ResolveTCPAddr("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := addrKey(a); got != c.want {
			t.Errorf("addrKey(%s) = %s, want %s", c.addr, got, c.want)
		}
	}
}
