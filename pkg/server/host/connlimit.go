package host

import (
	"container/list"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/throttle"
)

// ConnLimiter is the HTTP listener: it hands out at most max connections
// at a time, and at most perAddr (0: any number) from one client address
// (addrKey). Its ConnState method must be the http.Server's ConnState, so
// that it knows which connections are idle.
//
// A new connection over its address's cap is refused: answered 503
// SERVICE_UNAVAILABLE with Retry-After and closed at once. At the total
// cap, the connection idle longest — one that has sent no request yet, or
// a keep-alive connection between requests — is closed to make room, so
// connections that say nothing cannot keep a client with a request out;
// only when every connection is in a request is the new one refused.
// Safe for concurrent use.
type ConnLimiter struct {
	net.Listener
	max, perAddr int
	log          *slog.Logger

	mu     sync.Mutex
	open   int
	byAddr map[string]int
	idle   list.List // of *limitedConn, the longest idle first
	// refused and evicted count since lastLog, for a warning in aggregate.
	refused, evicted int
	lastLog          time.Time
}

// NewConnLimiter wraps ln.
func NewConnLimiter(ln net.Listener, max, perAddr int, log *slog.Logger) *ConnLimiter {
	return &ConnLimiter{Listener: ln, max: max, perAddr: perAddr, log: log, byAddr: map[string]int{}}
}

// limitedConn is a connection ConnLimiter handed out. Closing it releases
// its place.
type limitedConn struct {
	net.Conn
	l        *ConnLimiter
	key      string
	idle     *list.Element // in l.idle while idle, else nil
	released bool          // its place is given back (under l.mu)
}

// Close releases the connection's place and closes it.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// Accept returns the next connection within the caps, refusing or making
// room as the type says.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := addrKey(c.RemoteAddr())
		l.mu.Lock()
		var victim *limitedConn
		switch {
		case l.perAddr > 0 && l.byAddr[key] >= l.perAddr:
			l.refuseLocked(c)
			continue
		case l.open >= l.max:
			front := l.idle.Front()
			if front == nil {
				l.refuseLocked(c)
				continue
			}
			victim = front.Value.(*limitedConn)
			l.releaseLocked(victim)
			l.evicted++
			l.logLocked()
		}
		lc := &limitedConn{Conn: c, l: l, key: key}
		l.open++
		l.byAddr[key]++
		lc.idle = l.idle.PushBack(lc) // idle until its first request
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Conn.Close() // its server goroutine ends on the error
		}
		return lc, nil
	}
}

// ConnState follows the http.Server's connections: idle (no request, or
// between requests) or busy.
func (l *ConnLimiter) ConnState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc.released {
		return
	}
	switch s {
	case http.StateActive:
		if lc.idle != nil {
			l.idle.Remove(lc.idle)
			lc.idle = nil
		}
	case http.StateIdle:
		if lc.idle != nil {
			l.idle.Remove(lc.idle)
		}
		lc.idle = l.idle.PushBack(lc)
	case http.StateHijacked, http.StateClosed:
		l.releaseLocked(lc)
	}
}

// releaseLocked gives c's place back, once.
func (l *ConnLimiter) releaseLocked(c *limitedConn) {
	if c.released {
		return
	}
	c.released = true
	if c.idle != nil {
		l.idle.Remove(c.idle)
		c.idle = nil
	}
	l.open--
	if l.byAddr[c.key]--; l.byAddr[c.key] <= 0 {
		delete(l.byAddr, c.key)
	}
}

// refuseLocked answers c 503 and closes it; it unlocks l.mu. A fresh
// connection's send buffer takes the short answer without waiting; the
// deadline is for the impossible case.
func (l *ConnLimiter) refuseLocked(c net.Conn) {
	l.refused++
	l.logLocked()
	l.mu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write(refusal)
	_ = c.Close()
}

// logLocked warns, at most every connLogEvery, of the connections refused
// and closed to make room since the last warning (counted from then; the
// first is warned of at once).
func (l *ConnLimiter) logLocked() {
	if now := time.Now(); now.Sub(l.lastLog) >= connLogEvery {
		l.log.Warn("HTTP connections over the caps (http.maxConnections, http.maxConnectionsPerAddress)",
			"refused", l.refused, "idleClosed", l.evicted, "open", l.open, "max", l.max, "perAddress", l.perAddr)
		l.refused, l.evicted, l.lastLog = 0, 0, now
	}
}

const connLogEvery = 10 * time.Second

// refusal is the whole answer to a refused connection.
var refusal = func() []byte {
	e := errs.Unavailable("too many connections; retry shortly")
	body, _ := json.Marshal(errs.BodyOf(e))
	ra, _ := e.RetryAfter()
	status := errs.StatusOf(e.Code)
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nRetry-After: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), ra, len(body), body)
}()

// addrKey is the client address a connection counts against, as failed
// authentication counts it (throttle.AddrPrefix): its IPv4 address, or
// its IPv6 address's /64.
func addrKey(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	return throttle.AddrString(throttle.AddrPrefix(ta.AddrPort().Addr()))
}

// MaxConnections is http.maxConnections, lowered (and logged) to three
// quarters of the process's file-descriptor limit where that is less: the
// rest is for NATS and the store's files.
func MaxConnections(configured int, log *slog.Logger) int {
	nofile := openFileLimit()
	fits := int(min(nofile/4*3, 1<<30))
	if nofile == 0 || configured <= fits {
		return configured
	}
	fits = max(fits, 16)
	log.Info("HTTP connection cap lowered to three quarters of the file-descriptor limit",
		"maxConnections", configured, "nofile", nofile, "cap", fits)
	return fits
}
