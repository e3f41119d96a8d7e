// Package egress is agentbus's edge to the outside web: the rules a
// webhook URL must pass (CheckURL, Refused) and the HTTP client that
// delivers to it (Client), which checks every address it dials again, so a
// name that resolves elsewhere at delivery (DNS rebinding) is refused too.
// It imports nothing of NATS and no other room of agentbus but errs.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
)

// Resolver looks up the addresses of a host name; *net.Resolver is one.
// Tests give their own, so that no test reaches a real name.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// lookupTimeout bounds the lookup of a host name in CheckURL.
const lookupTimeout = 10 * time.Second

// Rules are the address rules of webhook targets. The zero value refuses
// every address Refused names and resolves names with net.DefaultResolver.
// Rules are safe for concurrent use.
type Rules struct {
	// AllowPrivate lets loopback, private (RFC 1918), shared (CGNAT),
	// link-local, unique local, site-local and benchmarking addresses and
	// localhost names through, for local development and tests. Cloud
	// metadata endpoints, unspecified, multicast, broadcast, documentation
	// and reserved addresses, and the deprecated IPv6 transition forms, stay
	// refused.
	AllowPrivate bool
	// Resolver looks up host names, in CheckURL and at every dial; nil is
	// net.DefaultResolver.
	Resolver Resolver
}

// ErrRefused is wrapped by the error of every dial the rules refuse.
var ErrRefused = errors.New("egress: address refused")

// CheckURL checks raw, a webhook URL: an absolute http or https URL of at
// most MaxURLLength bytes, with a host, without user information, whose
// host is written the one way every client reads alike (no decimal, octal,
// hexadecimal or short IPv4 forms, no trailing dot, no IPv6 zone, ASCII
// names), and every address of which is allowed: a literal address, or
// every address the host name resolves to now. It returns the parsed URL.
//
// A name RFC 2606 reserves for documentation (under the top-level domain
// example, or example.com, example.net, example.org) is accepted as it
// stands, without a lookup, so that the examples agentbus ships are
// accepted offline too; Client never delivers to one (each attempt is
// refused, with no lookup).
//
// A URL the rules refuse is an *errs.Error with code WEBHOOK_URL_REJECTED
// whose details.reason says why; it never repeats the URL (which may hold a
// password) nor the addresses a name resolves to (which would map a private
// network to whoever asks). A lookup that times out or fails for now is a
// SERVICE_UNAVAILABLE error, to retry.
func (r Rules) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	u, h, why := parseURL(raw)
	if why != "" {
		return nil, rejected(why)
	}
	if h.name == "" {
		if why, refused := r.refused(h.addr); refused {
			return nil, rejected(fmt.Sprintf("%s is %s", h.addr, why))
		}
		return u, nil
	}
	if localName(h.name) && !r.AllowPrivate {
		return nil, rejected(fmt.Sprintf("host %q is a loopback name (RFC 6761)%s", h.name, privateHint))
	}
	if documentationName(h.name) {
		return u, nil
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	addrs, err := r.resolver().LookupNetIP(lctx, "ip", h.name)
	var dnsErr *net.DNSError
	switch {
	case err != nil && (ctx.Err() != nil || errors.As(err, &dnsErr) && (dnsErr.IsTimeout || dnsErr.IsTemporary)):
		e := errs.Unavailable(fmt.Sprintf("the webhook host %q could not be looked up in time; retry shortly", h.name))
		e.Err = err
		return nil, e
	case err != nil || len(addrs) == 0:
		return nil, rejected(fmt.Sprintf("host %q does not resolve", h.name))
	}
	for _, a := range addrs {
		if why, refused := r.refused(a); refused {
			return nil, rejected(fmt.Sprintf("host %q resolves to %s", h.name, why))
		}
	}
	return u, nil
}

// privateHint ends the reason of a refusal AllowPrivate would lift.
const privateHint = "; private targets need the operator setting --allow-private-webhooks"

// refused applies the rules to ip: Refused, less what AllowPrivate lifts.
// The reason of a refusal AllowPrivate would lift says so.
func (r Rules) refused(ip netip.Addr) (string, bool) {
	c := classify(ip)
	switch {
	case c.why == "", c.local && r.AllowPrivate:
		return "", false
	case c.local:
		return c.why + privateHint, true
	}
	return c.why, true
}

func (r Rules) resolver() Resolver {
	if r.Resolver == nil {
		return net.DefaultResolver
	}
	return r.Resolver
}

// rejected is the WEBHOOK_URL_REJECTED error with reason.
func rejected(reason string) *errs.Error {
	return &errs.Error{
		Code:    errs.CodeWebhookURLRejected,
		Message: "webhook.url is rejected: " + reason,
		Details: map[string]any{"reason": reason},
	}
}
