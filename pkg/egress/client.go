package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// MaxResponseHeaderBytes bounds the response headers a Client reads.
const MaxResponseHeaderBytes = 64 << 10

// minDialShare is the least time a dial to one of several addresses gets
// (as net.Dialer gives it).
const minDialShare = 2 * time.Second

// Client returns an HTTP client for webhook deliveries under the rules:
//
//   - every address it connects to is checked at dial time, in the
//     dialer's Control, on the address actually dialled: a name that
//     resolved to a public address when the URL was checked and resolves
//     to a refused one now (DNS rebinding) fails, with an error wrapping
//     ErrRefused;
//   - a name reserved for documentation (see CheckURL) is refused
//     without a lookup, with an error wrapping ErrRefused;
//   - it never uses a proxy, whatever HTTP_PROXY and the like say;
//   - it never follows a redirect: a 3xx is returned as the response;
//   - timeout bounds each request as a whole (connect, TLS, headers, and
//     reading the body);
//   - response headers are read up to MaxResponseHeaderBytes; read bodies
//     with ReadBody.
//
// Connections are kept and reused (the check runs when one is made); each
// call makes a new pool, so make one client and share it. The client is
// safe for concurrent use.
func (r Rules) Client(timeout time.Duration) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            r.dial,
			ForceAttemptHTTP2:      true,
			TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:    10 * time.Second,
			MaxIdleConns:           1024,
			MaxIdleConnsPerHost:    64,
			IdleConnTimeout:        90 * time.Second,
			MaxResponseHeaderBytes: MaxResponseHeaderBytes,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       timeout,
	}
}

// dial connects to addr ("host:port"), resolving the host with the rules'
// resolver and trying its addresses in turn; the dialer's Control refuses
// each address the rules refuse. A host refused before any address is
// dialled is a *net.OpError (op "dial") wrapping ErrRefused, as a refusal
// of the Control is; a failed lookup is the resolver's *net.DNSError.
func (r Rules) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	hostname, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("egress: port %q: %w", p, err)
	}
	ips, err := r.addresses(ctx, hostname)
	if errors.Is(err, ErrRefused) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Control: r.control, KeepAlive: 30 * time.Second}
	var first error
	for i, ip := range ips {
		dctx, cancel := shareDeadline(ctx, len(ips)-i)
		conn, err := d.DialContext(dctx, network, netip.AddrPortFrom(ip, uint16(port)).String())
		cancel()
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// addresses returns the addresses of hostname: itself when it is one, else
// what the resolver answers. A name no URL passing CheckURL could hold,
// or one reserved for documentation, is refused without a lookup.
func (r Rules) addresses(ctx context.Context, hostname string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(hostname); err == nil {
		return []netip.Addr{ip}, nil
	}
	h, why := parseHost(hostname, false)
	switch {
	case why != "" || h.name == "":
		return nil, fmt.Errorf("%w: the host is not a DNS name the rules take", ErrRefused)
	case documentationName(h.name):
		return nil, fmt.Errorf("%w: host %q is reserved for documentation (RFC 2606): nothing is delivered to it", ErrRefused, h.name)
	}
	ips, err := r.resolver().LookupNetIP(ctx, "ip", hostname)
	if err != nil {
		return nil, withoutServer(err)
	}
	if len(ips) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: hostname, IsNotFound: true}
	}
	return ips, nil
}

// withoutServer returns err with the address of the DNS server that
// answered taken out of a *net.DNSError ("lookup <name> on <server>:
// ..."): it is this network's, and a delivery's error is shown to the
// subscriber, whose own name it looked up.
func withoutServer(err error) error {
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || dnsErr.Server == "" {
		return err
	}
	e := *dnsErr
	e.Server = ""
	return &e
}

// control is the dialer's Control: it refuses the address about to be
// connected to when the rules do. It names the kind of address, not the
// address, since a delivery's error is shown to the subscriber.
func (r Rules) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q is not an IP address and port", ErrRefused, address)
	}
	if why, refused := r.refused(ap.Addr()); refused {
		return fmt.Errorf("%w: %s", ErrRefused, why)
	}
	return nil
}

// shareDeadline gives one of left remaining dials its share of ctx's
// time, at least minDialShare, so an address that does not answer leaves
// time for the next.
func shareDeadline(ctx context.Context, left int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || left < 2 {
		return ctx, func() {}
	}
	share := max(time.Until(deadline)/time.Duration(left), minDialShare)
	return context.WithTimeout(ctx, share)
}

// ReadBody reads resp's body up to limit bytes and closes it. truncated
// reports that the body held more; the rest is not read. err is the read's
// error, if any (a timeout of the client included), with what was read
// before it.
func ReadBody(resp *http.Response, limit int64) (body []byte, truncated bool, err error) {
	defer resp.Body.Close()
	limit = max(limit, 0)
	body, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if int64(len(body)) > limit {
		return body[:limit], true, err
	}
	return body, false, err
}
