// Package throttle holds agentbus's request budgets: token buckets per id
// (Limiter), the places callers hold open in all and per caller (Slots:
// live streams, MCP sessions, reads of the event log), the client address
// a request counts against (behind trusted proxies), and the throttle of
// failed authentications per client address with its aggregate log
// (Failures). It never sees a credential, and
// imports neither NATS nor an HTTP framework.
package throttle

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// ParseProxies parses trusted proxy addresses, each an IP or a CIDR, as
// ClientPrefix takes them. It fails on the first that is neither.
func ParseProxies(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// unknownClient is the client prefix of a peer that is not an IP.
var unknownClient = netip.PrefixFrom(netip.IPv6Unspecified(), 128)

// ClientPrefix returns the client address of r that failed authentication
// is counted against: the TCP peer (r.RemoteAddr) or, when the peer is
// one of trustedProxies, the nearest address in X-Forwarded-For that is
// not a trusted proxy (an unreadable entry stops the walk at the last
// trusted hop). An IPv6 address counts as its /64, which one host usually
// holds whole: the prefix is /32 for IPv4, /64 for IPv6. A peer address
// that is not an IP (not a TCP connection) is one prefix, "unknown"
// (AddrString); all such share one budget.
func ClientPrefix(r *http.Request, trustedProxies []netip.Prefix) netip.Prefix {
	client := parseHostPort(r.RemoteAddr)
	if !client.IsValid() {
		return unknownClient
	}
	if len(trustedProxies) > 0 && trusted(trustedProxies, client) {
		hops := r.Header.Values("X-Forwarded-For")
	walk:
		for i := len(hops) - 1; i >= 0; i-- {
			list := strings.Split(hops[i], ",")
			for j := len(list) - 1; j >= 0; j-- {
				a := parseHostPort(strings.TrimSpace(list[j]))
				if !a.IsValid() {
					break walk
				}
				client = a
				if !trusted(trustedProxies, a) {
					break walk
				}
			}
		}
	}
	return AddrPrefix(client)
}

// AddrPrefix returns the prefix client address a counts as: an IPv4
// address (bare or IPv4-mapped) alone, /32; an IPv6 address as its /64,
// which one host usually holds whole. Written with AddrString.
func AddrPrefix(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// AddrString writes a client prefix: an IPv4 address bare, an IPv6 /64
// as a prefix, a peer that is not an IP as "unknown".
func AddrString(p netip.Prefix) string {
	switch {
	case p == unknownClient:
		return "unknown"
	case p.Addr().Is4():
		return p.Addr().String()
	}
	return p.String()
}

func trusted(proxies []netip.Prefix, a netip.Addr) bool {
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHostPort reads "ip", "ip:port" or "[ip]:port", without a zone; the
// zero Addr when it is none of them.
func parseHostPort(s string) netip.Addr {
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}
	}
	return a.Unmap()
}

// failureLog counts failed authentications and logs them as one warning
// per interval that saw any ("authentication failures"): how many
// credentials were refused, by reason; how many requests were throttled;
// how many client addresses, and the busiest few with their counts. It
// never sees a credential. Safe for concurrent use.
type failureLog struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu  sync.Mutex
	cur *failureWindow // nil when nothing happened since the last report
}

// failureWindow is what one report covers.
type failureWindow struct {
	began     time.Time
	failed    int
	throttled int
	reasons   map[string]int
	addresses map[netip.Prefix]int // at most maxTrackedAddresses
	untracked int                  // failures and throttled requests of other addresses
	timer     *time.Timer          // reports the window at its end
}

// maxTrackedAddresses bounds the addresses one report counts apart;
// maxLoggedAddresses is how many of the busiest it names.
const (
	maxTrackedAddresses = 10000
	maxLoggedAddresses  = 5
)

func newFailureLog(log *slog.Logger, every time.Duration, now func() time.Time) *failureLog {
	return &failureLog{log: log, every: every, now: now}
}

// failed counts a credential refused for reason from client.
func (f *failureLog) failed(client netip.Prefix, reason string) {
	f.count(client, func(w *failureWindow) {
		w.failed++
		w.reasons[reason]++
	})
}

// throttled counts a request from client refused by the failure
// throttle.
func (f *failureLog) throttled(client netip.Prefix) {
	f.count(client, func(w *failureWindow) { w.throttled++ })
}

func (f *failureLog) count(client netip.Prefix, add func(*failureWindow)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.cur
	if w == nil {
		w = &failureWindow{began: f.now(), reasons: map[string]int{}, addresses: map[netip.Prefix]int{}}
		f.cur = w
		w.timer = time.AfterFunc(f.every, func() { f.report(w) })
	}
	add(w)
	if _, ok := w.addresses[client]; ok || len(w.addresses) < maxTrackedAddresses {
		w.addresses[client]++
	} else {
		w.untracked++
	}
}

// flush reports the current window, if any, now.
func (f *failureLog) flush() {
	f.mu.Lock()
	w := f.cur
	f.mu.Unlock()
	if w != nil {
		w.timer.Stop()
		f.report(w)
	}
}

// report logs window w unless it was reported already; the next failure
// starts a new one.
func (f *failureLog) report(w *failureWindow) {
	f.mu.Lock()
	if f.cur != w {
		f.mu.Unlock()
		return
	}
	f.cur = nil
	f.mu.Unlock()
	reasons := make([]any, 0, len(w.reasons))
	for _, r := range slices.Sorted(maps.Keys(w.reasons)) {
		reasons = append(reasons, slog.Int(r, w.reasons[r]))
	}
	busiest := slices.SortedFunc(maps.Keys(w.addresses), func(a, b netip.Prefix) int {
		return cmp.Or(cmp.Compare(w.addresses[b], w.addresses[a]), a.Addr().Compare(b.Addr()))
	})
	top := make([]any, 0, maxLoggedAddresses)
	for _, a := range busiest[:min(len(busiest), maxLoggedAddresses)] {
		top = append(top, slog.Int(AddrString(a), w.addresses[a]))
	}
	f.log.Warn("authentication failures",
		"since", w.began.UTC().Format(time.RFC3339),
		"failed", w.failed, "throttled", w.throttled, slog.Group("reasons", reasons...),
		"addressCount", len(w.addresses), slog.Group("addresses", top...), "otherAddressRequests", w.untracked)
}

// Failures throttles failed authentication per client address: every
// credential refused spends one from the address's bucket, and an address
// whose bucket is empty is refused before its credential is looked at.
// Refusals and throttled requests are logged in aggregate, one warning
// with counts per interval. Safe for concurrent use.
type Failures struct {
	buckets *Limiter[netip.Prefix] // nil when the throttle is off
	log     *failureLog
}

// NewFailures returns the throttle of perSecond failures a second per
// client address, with burst (perSecond 0: no throttle, only the log),
// logging to log every logEvery, on the clock now.
func NewFailures(perSecond float64, burst int, logEvery time.Duration, log *slog.Logger, now func() time.Time) *Failures {
	f := &Failures{log: newFailureLog(log, logEvery, now)}
	if perSecond > 0 {
		f.buckets = NewLimiter(perSecond, burst, netip.Prefix{}, now)
	}
	return f
}

// Attempt spends one of the client's failed authentication budget before
// its credential is checked, returning the bucket spent from (nil when
// the throttle is off); Settle gives it back unless the credential is
// refused. When the budget is spent, Attempt returns how long until it
// is not, and false, and counts the refusal for the log.
func (f *Failures) Attempt(client netip.Prefix) (b *Bucket, wait time.Duration, ok bool) {
	if f.buckets == nil {
		return nil, 0, true
	}
	b, wait, ok = f.buckets.Reserve(client)
	if !ok {
		f.log.throttled(client)
	}
	return b, wait, ok
}

// Settle ends an attempt: a credential refused for reason keeps its
// budget spent and is counted for the log; with reason "" (not refused: a
// success, or a key store failure) the budget is given back.
func (f *Failures) Settle(client netip.Prefix, b *Bucket, reason string) {
	switch {
	case reason != "":
		f.log.failed(client, reason)
	case b != nil:
		f.buckets.Refund(b)
	}
}

// Flush logs the failures counted since the last report now rather than
// at the end of the interval: for a shutdown.
func (f *Failures) Flush() { f.log.flush() }
