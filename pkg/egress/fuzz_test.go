package egress_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/egress"
)

// publicResolver answers every name with one public address, without
// looking anything up.
type publicResolver struct{}

func (publicResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
}

// FuzzCheckURL: whatever the URL, a host CheckURL accepts is either an
// address the rules allow, in its one standard form, or an ASCII DNS name
// no client could read as an address: its last label is neither a decimal
// nor a hexadecimal (0x) number, and it is not localhost.
func FuzzCheckURL(f *testing.F) {
	for _, seed := range []string{
		"https://hooks.acme.test/hook", "http://93.184.215.14:8080/", "http://[2606:4700::1111]/",
		"http://127.0.0.1/", "http://0x7f.1/", "http://2130706433/", "http://0177.0.0.1/",
		"http://127.0.0.1./", "http://[::ffff:127.0.0.1]/", "http://[fe80::1%25eth0]/",
		"http://localhost./", "http://a.b.0x10/", "http://a.b.09/", "http://user@h.example/",
		"http://h.example:65535/", "http://[64:ff9b::7f00:1]/", "http://1.2.3.4.5/", "http://0x/",
	} {
		f.Add(seed)
	}
	rules := egress.Rules{Resolver: publicResolver{}}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := rules.CheckURL(context.Background(), raw)
		if err != nil {
			return
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.User != nil || u.Host == "" {
			t.Fatalf("%q accepted as scheme %q, user %v, host %q", raw, u.Scheme, u.User, u.Host)
		}
		h := u.Hostname()
		if ip, err := netip.ParseAddr(h); err == nil {
			if why, refused := egress.Refused(ip); refused {
				t.Fatalf("%q accepted with %s, %s", raw, ip, why)
			}
			if ip.Zone() != "" || ip.Is4() && ip.String() != h {
				t.Fatalf("%q accepted with host %q, not in its standard form %s", raw, h, ip)
			}
			return
		}
		if net.ParseIP(h) != nil {
			t.Fatalf("%q accepted with host %q, which net reads as an address", raw, h)
		}
		if strings.Trim(strings.ToLower(h), "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" || strings.HasSuffix(h, ".") {
			t.Fatalf("%q accepted with host %q, not a plain ASCII name", raw, h)
		}
		labels := strings.Split(strings.ToLower(h), ".")
		last := labels[len(labels)-1]
		hex := strings.HasPrefix(last, "0x") && strings.Trim(last[2:], "0123456789abcdef") == ""
		if strings.Trim(last, "0123456789") == "" || hex {
			t.Fatalf("%q accepted with host %q, whose last label is a number", raw, h)
		}
		if labels[len(labels)-1] == "localhost" {
			t.Fatalf("%q accepted with a localhost name", raw)
		}
	})
}
