package abuse_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestEdgeIdleFloodLeavesClientsServed: two clients hold as many idle
// connections as they can — one fails authentication once on each and
// then stays silent, the other never sends a byte — against an agentbus
// whose file-descriptor limit is 1024. A third client, with a valid key,
// is still answered at once: a connection whose request failed
// authentication is closed, and one address cannot take more than its
// share of the connections.
func TestEdgeIdleFloodLeavesClientsServed(t *testing.T) {
	bin := edgeBuild(t)
	p := edgeStart(t, bin, 1024, []string{"AGENTBUS_BOOTSTRAP_KEY=" + edgeBootstrap}, "--auth", "apikey-header")
	client := edgeClientFrom("127.0.0.1", 5*time.Second)
	served := func(when string) {
		t.Helper()
		status, _, body, err := testkit.Send(client, http.MethodGet, p.URL+"/events?limit=1", "", nil, "X-API-Key", edgeBootstrap)
		if err != nil || status != http.StatusOK {
			t.Fatalf("%s: GET /events with a valid key: %d %v %.200s", when, status, err, body)
		}
	}
	served("before the flood")

	var mu sync.Mutex
	var held []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	var unauthorized atomic.Int64
	flood := func(local string, n int, guess bool) {
		var wg sync.WaitGroup
		deadline := time.Now().Add(8 * time.Second)
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n && time.Now().Before(deadline); i += 16 {
					c, err := edgeDialFrom(local, p.Addr)
					if err != nil {
						continue
					}
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
					if !guess {
						continue
					}
					_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
					fmt.Fprintf(c, "GET /events HTTP/1.1\r\nHost: %s\r\nX-API-Key: wrong-key-%d-0123456789abcdef\r\n\r\n", p.Addr, i)
					if res, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
						if res.StatusCode == http.StatusUnauthorized {
							unauthorized.Add(1)
						}
						res.Body.Close()
					}
					_ = c.SetDeadline(time.Time{})
				}
			}()
		}
		wg.Wait()
	}
	// First the guesses, then the silent connections (which agentbus
	// closes after http.readHeaderTimeout, 10s): the client is checked
	// while both are held.
	began := time.Now()
	flood("127.0.0.2", 700, true)
	flood("127.0.0.3", 700, false)
	mu.Lock()
	t.Logf("flood: %d connections opened in %s, %d answered 401", len(held), time.Since(began).Round(time.Millisecond), unauthorized.Load())
	mu.Unlock()
	for i := range 10 {
		served(fmt.Sprintf("during the flood, request %d", i+1))
	}
	if out := p.out.String(); strings.Contains(out, "too many open files") {
		t.Errorf("agentbus ran out of file descriptors:\n%.2000s", out)
	}
}

// TestEdgeConnectionsPerAddress: a client address past its cap of
// connections gets 503 SERVICE_UNAVAILABLE with Retry-After on each new
// one, and the connection is closed; another address is served.
func TestEdgeConnectionsPerAddress(t *testing.T) {
	t.Parallel()
	s := testkit.Agentbus(t, testkit.NoNATSPort, func(c *settings.Config) { c.HTTP.MaxConnectionsPerAddress = 20 })
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 30 {
		c, err := edgeDialFrom("127.0.0.2", s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	type answer struct {
		res  *http.Response
		body []byte
		err  error
	}
	answers := make([]answer, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns { // each read on its own: a deadline passed fails a read before it looks
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			answers[i].res, answers[i].err = res, err
			if err == nil {
				answers[i].body, _ = io.ReadAll(res.Body)
			}
		}()
	}
	wg.Wait()
	refused := 0
	for i, a := range answers {
		if a.err != nil {
			if i >= 20 {
				t.Errorf("connection %d, past the cap: no answer: %v", i+1, a.err)
			}
			continue
		}
		if i < 20 || a.res.StatusCode != http.StatusServiceUnavailable || edgeCode(a.body) != "SERVICE_UNAVAILABLE" || a.res.Header.Get("Retry-After") == "" {
			t.Errorf("connection %d: %d %v %s", i+1, a.res.StatusCode, a.res.Header, a.body)
		}
		refused++
	}
	if refused != 10 {
		t.Errorf("%d connections refused, want 10", refused)
	}
	status, _, body, err := testkit.Send(edgeClientFrom("127.0.0.1", 5*time.Second), http.MethodGet, s.URL+"/events?limit=1", "", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("another address: %d %v %s", status, err, body)
	}
}

// TestEdgeConnectionsTotal: at the cap of connections, a new connection
// closes the one idle longest, so connections that say nothing cannot
// keep a client with a request out.
func TestEdgeConnectionsTotal(t *testing.T) {
	t.Parallel()
	s := testkit.Agentbus(t, testkit.NoNATSPort, func(c *settings.Config) {
		c.HTTP.MaxConnections, c.HTTP.MaxConnectionsPerAddress = 40, 0
	})
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 60 {
		c, err := edgeDialFrom(fmt.Sprintf("127.0.0.%d", 2+i%4), s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		time.Sleep(2 * time.Millisecond) // an order to close them in
	}
	client := edgeClientFrom("127.0.0.1", 5*time.Second)
	for i := range 5 {
		status, _, body, err := testkit.Send(client, http.MethodGet, s.URL+"/events?limit=1", "", nil)
		if err != nil || status != http.StatusOK {
			t.Fatalf("request %d: %d %v %s", i+1, status, err, body)
		}
	}
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns[:20] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := closed.Load(); n != 20 {
		t.Errorf("%d of the 20 oldest idle connections closed, want all", n)
	}
}

// TestEdgeUnreadAnswersTimeOut: a client that pipelines requests and never
// reads the answers holds its connection no longer than the write timeout.
func TestEdgeUnreadAnswersTimeOut(t *testing.T) {
	t.Parallel()
	s := testkit.Agentbus(t, testkit.NoNATSPort, func(c *settings.Config) {
		c.HTTP.WriteTimeout, c.Registry.WaitTimeout = settings.Duration(2*time.Second), settings.Duration(time.Second)
	})
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := fmt.Sprintf("GET /openapi.json HTTP/1.1\r\nHost: %s\r\n\r\n", s.Addr)
	go func() { // the server reads requests as it answers them
		for range 1000 {
			if _, err := io.WriteString(c, req); err != nil {
				return
			}
		}
	}()
	time.Sleep(5 * time.Second)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection is still open 5s after its answers stopped being read (read %d bytes since)", n)
	}
}
