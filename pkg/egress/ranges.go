package egress

import (
	"fmt"
	"net/netip"
)

// class is what the address rules make of one IP address.
type class struct {
	// why names the address's kind ("a loopback address"); empty for a
	// public address.
	why string
	// local marks a private or local kind (loopback, RFC 1918, CGNAT,
	// link-local, ULA, benchmarking): one Rules.AllowPrivate lets through.
	// Every other refused kind is refused whatever the rules say.
	local bool
}

// span is one row of the classification tables.
type span struct {
	prefix netip.Prefix
	class
}

func row(prefix, why string, local bool) span {
	return span{netip.MustParsePrefix(prefix), class{why, local}}
}

const metadata = "a cloud metadata address"

// v4 is the IPv4 table: the IANA IPv4 Special-Purpose Address Registry,
// multicast, and the metadata endpoints clouds serve on special addresses,
// and on one public address (Azure's WireServer, reachable from every
// Azure VM, which hands out the VM's configuration and certificates).
// The first row that holds an address decides (more specific rows first).
var v4 = []span{
	row("169.254.169.254/32", metadata, false), // AWS, GCP, Azure, OpenStack, DigitalOcean, ...
	row("169.254.170.2/32", metadata, false),   // AWS ECS task metadata
	row("169.254.170.23/32", metadata, false),  // AWS EKS pod identity
	row("100.100.100.200/32", metadata, false), // Alibaba Cloud
	row("192.0.0.192/32", metadata, false),     // Oracle Cloud
	row("168.63.129.16/32", metadata, false),   // Azure WireServer (a public address)
	row("0.0.0.0/8", `a "this network" address (0.0.0.0/8)`, false),
	row("10.0.0.0/8", "a private (RFC 1918) address", true),
	row("100.64.0.0/10", "a shared (CGNAT, RFC 6598) address", true),
	row("127.0.0.0/8", "a loopback address", true),
	row("169.254.0.0/16", "a link-local address", true),
	row("172.16.0.0/12", "a private (RFC 1918) address", true),
	row("192.0.0.0/24", "an IETF protocol assignment (192.0.0.0/24)", false),
	row("192.0.2.0/24", "a documentation address (RFC 5737)", false),
	row("192.31.196.0/24", "an AS112 address (RFC 7535)", false),
	row("192.52.193.0/24", "an AMT address (RFC 7450)", false),
	row("192.88.99.0/24", "a 6to4 relay anycast address (deprecated)", false),
	row("192.168.0.0/16", "a private (RFC 1918) address", true),
	row("192.175.48.0/24", "an AS112 address (RFC 7534)", false),
	row("198.18.0.0/15", "a benchmarking address (RFC 2544)", true),
	row("198.51.100.0/24", "a documentation address (RFC 5737)", false),
	row("203.0.113.0/24", "a documentation address (RFC 5737)", false),
	row("224.0.0.0/4", "a multicast address", false),
	row("255.255.255.255/32", "the limited broadcast address", false),
	row("240.0.0.0/4", "a reserved address (240.0.0.0/4)", false),
}

// v6 is the IPv6 table: the IANA IPv6 Special-Purpose Address Registry,
// multicast and the deprecated ranges. The forms that embed an IPv4 address
// (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) are read before it,
// and an address outside the global unicast space after it.
var v6 = []span{
	row("::/128", "the unspecified address", false),
	row("::1/128", "a loopback address", true),
	row("fd00:ec2::254/128", metadata, false), // AWS
	row("fd00:ec2::23/128", metadata, false),  // AWS EKS pod identity
	row("64:ff9b:1::/48", "a local-use NAT64 address (RFC 8215)", false),
	row("100::/64", "a discard-only address (RFC 6666)", false),
	row("100:0:0:1::/64", "a dummy address (RFC 9780)", false),
	row("2001:2::/48", "a benchmarking address (RFC 5180)", true),
	row("2001:10::/28", "an ORCHID address (deprecated)", false),
	row("2001:20::/28", "an ORCHIDv2 address (RFC 7343)", false),
	row("2001::/23", "an IETF protocol assignment (2001::/23)", false),
	row("2001:db8::/32", "a documentation address (RFC 3849)", false),
	row("3fff::/20", "a documentation address (RFC 9637)", false),
	row("2620:4f:8000::/48", "an AS112 address (RFC 7534)", false),
	row("fc00::/7", "a unique local (ULA) address", true),
	row("fe80::/10", "a link-local address", true),
	row("fec0::/10", "a site-local address (deprecated)", true),
	row("ff00::/8", "a multicast address", false),
}

var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	compatible = netip.MustParsePrefix("::/96")
	sixToFour  = netip.MustParsePrefix("2002::/16")
	teredo     = netip.MustParsePrefix("2001::/32")
	unicast    = netip.MustParsePrefix("2000::/3")
)

// Refused reports whether the address rules refuse ip as a webhook target
// whatever the operator allows, or by default, and why ("a loopback
// address"). It refuses every address the IANA IPv4 and IPv6
// special-purpose registries list, multicast and broadcast, cloud metadata
// endpoints, IPv6 outside the global unicast space 2000::/3, and the
// IPv4-mapped, IPv4-compatible, NAT64, 6to4 and Teredo forms; an
// IPv4-mapped or NAT64 (64:ff9b::/96) form of a public IPv4 address is
// public, as a DNS64 resolver answers for an IPv4-only host. A zone is
// ignored. Rules.AllowPrivate lifts some of these refusals; Refused does
// not consult it.
func Refused(ip netip.Addr) (why string, refused bool) {
	c := classify(ip)
	return c.why, c.why != ""
}

// classify returns the class of ip.
func classify(ip netip.Addr) class {
	ip = ip.WithZone("") // a prefix holds no address with a zone
	switch {
	case !ip.IsValid():
		return class{why: "not an IP address"}
	case ip.Is4():
		return lookup(v4, ip)
	case ip.Is4In6():
		return embedded(ip.Unmap(), "an IPv4-mapped form", true)
	case nat64.Contains(ip):
		return embedded(last4(ip), "a NAT64 form", true)
	case ip == netip.IPv6Unspecified(), ip == netip.IPv6Loopback():
		return lookup(v6, ip) // both in ::/96 below
	case compatible.Contains(ip):
		return embedded(last4(ip), "an IPv4-compatible form (::/96, deprecated)", false)
	case sixToFour.Contains(ip):
		b := ip.As16()
		return embedded(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), "a 6to4 form (2002::/16, deprecated)", false)
	case teredo.Contains(ip):
		return class{why: "a Teredo address (2001::/32)"}
	}
	if c := lookup(v6, ip); c.why != "" {
		return c
	}
	if !unicast.Contains(ip) {
		return class{why: "an address outside the global unicast space (2000::/3), reserved by the IETF"}
	}
	return class{}
}

// embedded classifies an IPv6 form that carries the IPv4 address inner.
// A form that reaches inner itself (mirror: IPv4-mapped, NAT64) is what
// inner is; any other form is refused, naming inner and its kind.
func embedded(inner netip.Addr, form string, mirror bool) class {
	c := lookup(v4, inner)
	switch {
	case c.why == "" && mirror:
		return class{}
	case c.why == "":
		return class{why: fmt.Sprintf("%s of %s", form, inner)}
	}
	return class{why: fmt.Sprintf("%s of %s, %s", form, inner, c.why), local: c.local && mirror}
}

// last4 returns the IPv4 address in the last 32 bits of ip.
func last4(ip netip.Addr) netip.Addr {
	b := ip.As16()
	return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
}

// lookup returns the class of the first row of table holding ip.
func lookup(table []span, ip netip.Addr) class {
	for _, s := range table {
		if s.prefix.Contains(ip) {
			return s.class
		}
	}
	return class{}
}
