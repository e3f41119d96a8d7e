package egress

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// MaxURLLength is the longest webhook URL the rules take, in bytes.
const MaxURLLength = 2048

// host is the host of a URL: a DNS name or an IP address.
type host struct {
	name string     // a DNS name in lower case; empty for an address
	addr netip.Addr // the address when name is empty
}

// parseURL reads raw as a webhook URL: absolute http or https, a host, no
// user information, and a host written the one way every client reads
// alike. It returns the reason when raw is not such a URL. It never
// resolves a name.
func parseURL(raw string) (*url.URL, host, string) {
	switch {
	case raw == "":
		return nil, host{}, "the URL is empty"
	case len(raw) > MaxURLLength:
		return nil, host{}, fmt.Sprintf("the URL is longer than %d bytes", MaxURLLength)
	case strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return nil, host{}, "the URL holds a space or a control character"
	case strings.ContainsRune(raw, '\\'):
		return nil, host{}, `the URL holds a backslash, which clients read differently ("\" is "/" to a browser)`
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return nil, host{}, fmt.Sprintf("the URL does not parse: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		if u.Scheme == "" {
			return nil, host{}, "the URL has no scheme: it must start with https:// or http://"
		}
		return nil, host{}, fmt.Sprintf("the scheme %q is not allowed: use https or http", u.Scheme)
	case u.User != nil:
		return nil, host{}, "user information (user:password@) is not allowed in the URL"
	case u.Opaque != "" || u.Host == "":
		return nil, host{}, "the URL has no host"
	case u.Fragment != "" || strings.HasSuffix(raw, "#"):
		return nil, host{}, "the URL must not have a fragment (nothing after # is sent)"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, host{}, fmt.Sprintf("port %s is not a port (1 to 65535)", p)
		}
	}
	h, why := parseHost(u.Hostname(), strings.HasPrefix(u.Host, "["))
	if why != "" {
		return nil, host{}, why
	}
	return u, h, ""
}

// parseHost reads the host of a URL (without brackets or port) the way a
// browser does (the WHATWG URL host parser, which reads IPv4 as inet_aton
// does), and accepts only the spellings every client reads alike: an IPv4
// address in four decimal numbers, an IPv6 address in brackets without a
// zone, or an ASCII DNS name without a trailing dot. It returns the reason
// for anything else.
func parseHost(h string, bracketed bool) (host, string) {
	if bracketed {
		ip, err := netip.ParseAddr(h)
		switch {
		case err != nil || !ip.Is6():
			return host{}, fmt.Sprintf("host [%s] is not an IPv6 address", h)
		case ip.Zone() != "":
			return host{}, fmt.Sprintf("host [%s] names an IPv6 zone, an interface of this machine", h)
		}
		return host{addr: ip}, ""
	}
	if strings.ContainsFunc(h, func(r rune) bool { return r >= 0x80 }) {
		return host{}, fmt.Sprintf("host %q is not ASCII: write an internationalised name in its xn-- (punycode) form", h)
	}
	if endsInNumber(h) {
		ip, ok := parseIPv4(h)
		switch {
		case !ok:
			return host{}, fmt.Sprintf("host %q is neither an IPv4 address nor a DNS name", h)
		case ip.String() != h:
			spelling := fmt.Sprintf("host %q is another spelling of %s", h, ip)
			if why, refused := Refused(ip); refused {
				spelling += ", " + why
			}
			return host{}, spelling + ": write an IPv4 address as four decimal numbers (a.b.c.d)"
		}
		return host{addr: ip}, ""
	}
	name := strings.ToLower(h)
	if why := checkName(name); why != "" {
		return host{}, fmt.Sprintf("host %q %s", h, why)
	}
	return host{name: name}, ""
}

// checkName returns why the lower-case name is not a DNS name agentbus
// sends to, or "".
func checkName(name string) string {
	if strings.HasSuffix(name, ".") {
		return "ends in a dot: write the name without it"
	}
	if len(name) > 253 {
		return "is longer than 253 characters"
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return "has an empty label"
		}
		if len(label) > 63 {
			return "has a label longer than 63 characters"
		}
		if i := strings.IndexFunc(label, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}); i >= 0 {
			return fmt.Sprintf("holds %q, which a DNS name does not", label[i:i+1])
		}
	}
	return ""
}

// localName reports whether name is localhost or under it, which RFC 6761
// reserves for loopback addresses.
func localName(name string) bool {
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}

// documentationName reports whether name is one RFC 2606 reserves for
// documentation, which no receiver can own: the top-level domain example,
// the domains example.com, example.net and example.org, and every name
// under them.
func documentationName(name string) bool {
	for _, d := range []string{"example", "example.com", "example.net", "example.org"} {
		if name == d || strings.HasSuffix(name, "."+d) {
			return true
		}
	}
	return false
}

// endsInNumber is the WHATWG URL standard's "ends in a number checker": a
// host whose last label (after at most one trailing dot) is a number is
// read as an IPv4 address, or is no host at all.
func endsInNumber(h string) bool {
	parts := strings.Split(h, ".")
	if parts[len(parts)-1] == "" {
		if len(parts) == 1 {
			return false
		}
		parts = parts[:len(parts)-1]
	}
	last := parts[len(parts)-1]
	if last != "" && strings.Trim(last, "0123456789") == "" {
		return true
	}
	_, ok := ipv4Number(last)
	return ok
}

// parseIPv4 is the WHATWG URL standard's IPv4 parser: one to four parts
// separated by dots (one trailing dot allowed), each decimal, octal
// (leading 0) or hexadecimal (leading 0x); the last part fills the bytes
// the others leave, as inet_aton reads "127.1" as 127.0.0.1.
func parseIPv4(h string) (netip.Addr, bool) {
	parts := strings.Split(h, ".")
	if parts[len(parts)-1] == "" && len(parts) > 1 {
		parts = parts[:len(parts)-1]
	}
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		n, ok := ipv4Number(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(5-len(parts))) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// ipv4Number is the WHATWG URL standard's IPv4 number parser: decimal,
// octal after a leading 0, hexadecimal after 0x or 0X ("0x" alone is 0).
// A number too large for 64 bits is returned as math.MaxUint64.
func ipv4Number(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	base := 10
	switch {
	case len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X"):
		s, base = s[2:], 16
	case len(s) >= 2 && s[0] == '0':
		s, base = s[1:], 8
	}
	if s == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(s, base, 64)
	if errors.Is(err, strconv.ErrRange) {
		return math.MaxUint64, true
	}
	return n, err == nil
}
