package egress_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/errs"
)

// fakeResolver answers from a table; a name it does not hold does not
// exist. No test looks up a real name.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]string
	err     error    // returned for every name when set
	asked   []string // the names looked up
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, host)
	if f.err != nil {
		return nil, f.err
	}
	answer, ok := f.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var addrs []netip.Addr
	for _, a := range answer {
		addrs = append(addrs, netip.MustParseAddr(a))
	}
	return addrs, nil
}

// names is what the fake resolver holds for the table tests.
func names() *fakeResolver {
	return &fakeResolver{answers: map[string][]string{
		"hooks.acme.test":              {"93.184.215.14", "2606:4700::1111"},
		"under_score.acme.test":        {"93.184.215.14"},
		"nat64.acme.test":              {"64:ff9b::5db8:d70e"},
		"internal.acme.test":           {"10.0.0.5"},
		"mixed.acme.test":              {"93.184.215.14", "127.0.0.1"},
		"ula.acme.test":                {"2606:4700::1111", "fd00::1"},
		"metadata.acme.test":           {"169.254.169.254"},
		"wireserver.acme.test":         {"93.184.215.14", "168.63.129.16"},
		"mapped.acme.test":             {"::ffff:10.1.1.1"},
		"cgnat.acme.test":              {"100.64.1.1"},
		"linklocal6.acme.test":         {"fe80::1"},
		"empty.acme.test":              {},
		"metadata.google.internal":     {"169.254.169.254"},
		"sixtofour.acme.test":          {"2002:c0a8:101::1"},
		"localhost":                    {"127.0.0.1"},
		"api.localhost":                {"127.0.0.1"},
		"unspecified.acme.test":        {"0.0.0.0"},
		"public-on-any.localhost.test": {"93.184.215.14"},
	}}
}

// TestCheckURLRefuses: every URL here is refused with WEBHOOK_URL_REJECTED,
// for the reason named. The table holds every special range of the IANA
// registries (v4, v6, and the IPv6 forms that embed an IPv4 address), the
// odd spellings of addresses browsers and inet_aton read, names that
// resolve to refused addresses, and URLs that are not http(s) or carry
// user information.
func TestCheckURLRefuses(t *testing.T) {
	t.Parallel()
	long := "https://hooks.acme.test/" + strings.Repeat("a", egress.MaxURLLength)
	cases := []struct{ url, why string }{
		// IPv4 special-purpose ranges.
		{"http://127.0.0.1/", "loopback"},
		{"http://127.1.2.3:8080/hook", "loopback"},
		{"http://10.0.0.1/", "private (RFC 1918)"},
		{"http://172.16.0.1/", "private (RFC 1918)"},
		{"http://172.31.255.255/", "private (RFC 1918)"},
		{"http://192.168.1.1/", "private (RFC 1918)"},
		{"http://169.254.169.254/latest/meta-data/", "cloud metadata"},
		{"http://169.254.170.2/v2/credentials", "cloud metadata"},
		{"http://100.100.100.200/", "cloud metadata"},
		{"http://192.0.0.192/", "cloud metadata"},
		{"http://168.63.129.16/machine?comp=goalstate", "cloud metadata"},
		{"http://168.63.129.16:32526/vmSettings", "cloud metadata"},
		{"http://169.254.1.1/", "link-local"},
		{"http://100.64.0.1/", "CGNAT"},
		{"http://100.127.255.254/", "CGNAT"},
		{"http://0.0.0.0/", "this network"},
		{"http://0.1.2.3/", "this network"},
		{"http://224.0.0.1/", "multicast"},
		{"http://239.255.255.250/", "multicast"},
		{"http://255.255.255.255/", "broadcast"},
		{"http://240.0.0.1/", "reserved"},
		{"http://192.0.2.1/", "documentation"},
		{"http://198.51.100.7/", "documentation"},
		{"http://203.0.113.9/", "documentation"},
		{"http://198.18.0.1/", "benchmarking"},
		{"http://198.19.255.1/", "benchmarking"},
		{"http://192.0.0.8/", "IETF protocol assignment"},
		{"http://192.88.99.1/", "6to4 relay"},
		{"http://192.31.196.1/", "AS112"},
		{"http://192.52.193.1/", "AMT"},
		// IPv6 special-purpose ranges.
		{"http://[::1]/", "loopback"},
		{"http://[0:0:0:0:0:0:0:1]:8080/", "loopback"},
		{"http://[::]/", "unspecified"},
		{"http://[fc00::1]/", "unique local"},
		{"http://[fd12:3456::1]/", "unique local"},
		{"http://[fd00:ec2::254]/", "cloud metadata"},
		{"http://[fe80::1]/", "link-local"},
		{"http://[fec0::1]/", "site-local"},
		{"http://[ff02::1]/", "multicast"},
		{"http://[2001:db8::1]/", "documentation"},
		{"http://[3fff::1]/", "documentation"},
		{"http://[2001:2::1]/", "benchmarking"},
		{"http://[2001:20::1]/", "ORCHIDv2"},
		{"http://[2001:4:112::1]/", "IETF protocol assignment"},
		{"http://[100::1]/", "discard-only"},
		{"http://[4000::1]/", "outside the global unicast space"},
		{"http://[5f00::1]/", "outside the global unicast space"},
		// IPv6 forms of IPv4 addresses.
		{"http://[::ffff:127.0.0.1]/", "IPv4-mapped form of 127.0.0.1, a loopback"},
		{"http://[::ffff:7f00:1]/", "IPv4-mapped form of 127.0.0.1, a loopback"},
		{"http://[::ffff:169.254.169.254]/", "IPv4-mapped form of 169.254.169.254, a cloud metadata"},
		{"http://[::ffff:10.0.0.1]/", "IPv4-mapped form of 10.0.0.1, a private"},
		{"http://[::127.0.0.1]/", "IPv4-compatible form (::/96, deprecated) of 127.0.0.1, a loopback"},
		{"http://[::5db8:d70e]/", "IPv4-compatible form (::/96, deprecated) of 93.184.215.14"},
		{"http://[64:ff9b::127.0.0.1]/", "NAT64 form of 127.0.0.1, a loopback"},
		{"http://[64:ff9b::a00:1]/", "NAT64 form of 10.0.0.1, a private"},
		{"http://[64:ff9b::169.254.169.254]/", "NAT64 form of 169.254.169.254, a cloud metadata"},
		{"http://[64:ff9b:1::a00:1]/", "local-use NAT64"},
		{"http://[2002:7f00:1::]/", "6to4 form (2002::/16, deprecated) of 127.0.0.1, a loopback"},
		{"http://[2002:a9fe:a9fe::1]/", "6to4 form (2002::/16, deprecated) of 169.254.169.254"},
		{"http://[2002:5db8:d70e::1]/", "6to4 form (2002::/16, deprecated) of 93.184.215.14"},
		{"http://[2001::1]/", "Teredo"},
		{"http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "Teredo"},
		{"http://[fe80::1%25eth0]/", "IPv6 zone"},
		{"http://[fe80::1%25251]/", "IPv6 zone"},
		// Odd spellings of IPv4 addresses, as browsers and inet_aton read them.
		{"http://2130706433/", "another spelling of 127.0.0.1, a loopback"},
		{"http://0177.0.0.1/", "another spelling of 127.0.0.1"},
		{"http://00000177.0.0.1/", "another spelling of 127.0.0.1"},
		{"http://017700000001/", "another spelling of 127.0.0.1"},
		{"http://0x7f.1/", "another spelling of 127.0.0.1"},
		{"http://0x7f000001/", "another spelling of 127.0.0.1"},
		{"http://0X7F.0x0.0x0.0x1/", "another spelling of 127.0.0.1"},
		{"http://127.1/", "another spelling of 127.0.0.1"},
		{"http://127.0.1/", "another spelling of 127.0.0.1"},
		{"http://127.0.0.1./", "another spelling of 127.0.0.1"},
		{"http://0/", "another spelling of 0.0.0.0"},
		{"http://0x/", "another spelling of 0.0.0.0"},
		{"http://0xA9FEA9FE/", "another spelling of 169.254.169.254, a cloud metadata"},
		{"http://3232235777/", "another spelling of 192.168.1.1, a private"},
		{"http://10.0.0.01/", "another spelling of 10.0.0.1"},
		{"http://1572394766/", "another spelling of 93.184.215.14:"}, // public, and still an odd spelling
		{"http://1.2.3.4.5/", "neither an IPv4 address nor a DNS name"},
		{"http://256.1.1.1/", "neither an IPv4 address nor a DNS name"},
		{"http://1.2.3.0x100/", "neither an IPv4 address nor a DNS name"},
		{"http://08.0.0.1/", "neither an IPv4 address nor a DNS name"},
		{"http://example.1/", "neither an IPv4 address nor a DNS name"},
		{"http://example.0x10/", "neither an IPv4 address nor a DNS name"},
		{"http://１２７.０.０.１/", "not ASCII"},
		{"http://[127.0.0.1]/", "does not parse"},
		// Names.
		{"http://localhost/", "loopback name"},
		{"http://LOCALHOST:8080/", "loopback name"},
		{"http://api.localhost/", "loopback name"},
		{"http://localhost./", "ends in a dot"},
		{"https://hooks.acme.test./", "ends in a dot"},
		{"http://internal.acme.test/", `"internal.acme.test" resolves to a private (RFC 1918)`},
		{"http://mixed.acme.test/", "resolves to a loopback"},
		{"http://ula.acme.test/", "resolves to a unique local"},
		{"http://metadata.acme.test/", "resolves to a cloud metadata"},
		{"http://metadata.google.internal/computeMetadata/v1/", "resolves to a cloud metadata"},
		{"http://mapped.acme.test/", "resolves to an IPv4-mapped form of 10.1.1.1"},
		{"http://cgnat.acme.test/", "resolves to a shared (CGNAT"},
		{"http://linklocal6.acme.test/", "resolves to a link-local"},
		{"http://sixtofour.acme.test/", "resolves to a 6to4 form"},
		{"http://unspecified.acme.test/", "resolves to a \"this network\""},
		{"http://nowhere.acme.test/", "does not resolve"},
		{"http://empty.acme.test/", "does not resolve"},
		{"http://ex!ample.com/", `holds "!"`},
		{"http://a..b.acme.test/", "empty label"},
		{"http://" + strings.Repeat("a", 64) + ".acme.test/", "longer than 63"},
		// Schemes, user information, syntax.
		{"ftp://hooks.acme.test/", `scheme "ftp"`},
		{"file:///etc/passwd", `scheme "file"`},
		{"gopher://hooks.acme.test/", `scheme "gopher"`},
		{"javascript:alert(1)", `scheme "javascript"`},
		{"//hooks.acme.test/", "no scheme"},
		{"hooks.acme.test/hook", "no scheme"},
		{"http:hooks.acme.test", "no host"},
		{"http:///hook", "no host"},
		{"https://hooks.acme.test/agentbus#frag", "fragment"},
		{"https://hooks.acme.test/agentbus#", "fragment"},
		{"http://user:s3cret@hooks.acme.test/", "user information"},
		{"http://@hooks.acme.test/", "user information"},
		{"http://hooks.acme.test@127.0.0.1/", "user information"},
		{"http://evil.com\\@127.0.0.1/", "backslash"},
		{"http://hooks.acme.test:0/", "port 0"},
		{"http://hooks.acme.test:99999/", "port 99999"},
		{"http://hooks.acme.test:8x/", "does not parse"},
		{"http://%31%32%37.0.0.1/", "does not parse"},
		{"http://hooks.acme.test/a b", "space"},
		{"http://hooks.acme.test/\n", "control character"},
		{"", "empty"},
		{long, "longer than 2048"},
	}
	if len(cases) < 60 {
		t.Fatalf("%d cases; the table must hold at least 60", len(cases))
	}
	rules := egress.Rules{Resolver: names()}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			u, err := rules.CheckURL(context.Background(), c.url)
			if err == nil {
				t.Fatalf("accepted as %s; want refused: %s", u, c.why)
			}
			reason := rejection(t, err)
			if !strings.Contains(reason, c.why) {
				t.Errorf("reason %q; want it to say %q", reason, c.why)
			}
			if strings.Contains(reason, "s3cret") || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error repeats the password: %v", err)
			}
		})
	}
}

// rejection returns the reason of a WEBHOOK_URL_REJECTED error, failing
// the test for any other error.
func rejection(t *testing.T, err error) string {
	t.Helper()
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.CodeWebhookURLRejected {
		t.Fatalf("error %v; want %s", err, errs.CodeWebhookURLRejected)
	}
	reason, _ := e.Details["reason"].(string)
	if reason == "" || !strings.Contains(e.Message, reason) {
		t.Fatalf("details.reason %q, message %q: want the reason in both", reason, e.Message)
	}
	return reason
}

// TestCheckURLAccepts: public addresses, in any form that reaches them,
// and names that resolve only to public addresses pass, unchanged. The
// names are answered by the fake resolver; nothing is sent to any of them.
func TestCheckURLAccepts(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"http://93.184.215.14/",
		"https://93.184.215.14:8443/hook?x=1",
		"https://[2606:4700::1111]/hook",
		"https://[2606:4700:0:0:0:0:0:1111]/",
		"http://[::ffff:93.184.215.14]/",
		"http://[64:ff9b::93.184.215.14]/",
		"https://hooks.acme.test/agentbus?tenant=a",
		"HTTPS://HOOKS.Acme.TEST:443/Path",
		"https://under_score.acme.test/",
		"https://nat64.acme.test/",
		"https://public-on-any.localhost.test/",
	} {
		t.Run(raw, func(t *testing.T) {
			u, err := egress.Rules{Resolver: names()}.CheckURL(context.Background(), raw)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
				t.Errorf("parsed as %#v", u)
			}
		})
	}
}

// TestAllowPrivate: the operator switch lets loopback and private targets
// through, and only them: metadata endpoints, unspecified, multicast,
// broadcast, documentation and reserved addresses, odd spellings and user
// information stay refused.
func TestAllowPrivate(t *testing.T) {
	t.Parallel()
	rules := egress.Rules{AllowPrivate: true, Resolver: names()}
	for _, raw := range []string{
		"http://127.0.0.1:8080/hook", "http://[::1]:8080/", "http://localhost:8080/",
		"http://api.localhost/", "http://10.0.0.1/", "http://192.168.1.1/", "http://172.16.0.1/",
		"http://100.64.0.1/", "http://169.254.1.1/", "http://[fd00::1]/", "http://[fe80::1]/",
		"http://198.18.0.1/", "http://[::ffff:127.0.0.1]/", "http://internal.acme.test/",
		"http://mixed.acme.test/", "http://ula.acme.test/",
	} {
		if _, err := rules.CheckURL(context.Background(), raw); err != nil {
			t.Errorf("%s: refused with private targets allowed: %v", raw, err)
		}
	}
	for raw, why := range map[string]string{
		"http://169.254.169.254/":          "cloud metadata",
		"http://[fd00:ec2::254]/":          "cloud metadata",
		"http://[::ffff:169.254.169.254]/": "cloud metadata",
		"http://metadata.acme.test/":       "cloud metadata",
		"http://168.63.129.16/":            "cloud metadata",
		"http://[::ffff:168.63.129.16]/":   "cloud metadata",
		"http://[64:ff9b::a83f:8110]/":     "cloud metadata",
		"http://wireserver.acme.test/":     "cloud metadata",
		"http://0.0.0.0/":                  "this network",
		"http://[::]/":                     "unspecified",
		"http://224.0.0.1/":                "multicast",
		"http://255.255.255.255/":          "broadcast",
		"http://192.0.2.1/":                "documentation",
		"http://240.0.0.1/":                "reserved",
		"http://[2002:7f00:1::]/":          "6to4",
		"http://[::127.0.0.1]/":            "IPv4-compatible",
		"http://[2001::1]/":                "Teredo",
		"http://127.1/":                    "another spelling",
		"http://[fe80::1%25eth0]/":         "IPv6 zone",
		"http://u:p@127.0.0.1/":            "user information",
	} {
		_, err := rules.CheckURL(context.Background(), raw)
		if err == nil {
			t.Errorf("%s: accepted with private targets allowed; want refused (%s)", raw, why)
			continue
		}
		if reason := rejection(t, err); !strings.Contains(reason, why) {
			t.Errorf("%s: reason %q; want it to say %q", raw, reason, why)
		}
	}
}

// TestRefusalHint: a refusal the operator switch would lift says so; one
// it would not does not.
func TestRefusalHint(t *testing.T) {
	t.Parallel()
	for raw, hint := range map[string]bool{
		"http://127.0.0.1/": true, "http://localhost/": true, "http://internal.acme.test/": true,
		"http://169.254.169.254/": false, "http://224.0.0.1/": false,
	} {
		_, err := egress.Rules{Resolver: names()}.CheckURL(context.Background(), raw)
		if got := strings.Contains(rejection(t, err), "--allow-private-webhooks"); got != hint {
			t.Errorf("%s: reason names the operator switch: %v, want %v", raw, got, hint)
		}
	}
}

// TestCheckURLLookups: a name is looked up once, an address never; a
// lookup that fails for now is SERVICE_UNAVAILABLE (to retry), not a
// refusal; a refused syntax is not looked up.
func TestCheckURLLookups(t *testing.T) {
	t.Parallel()
	r := names()
	rules := egress.Rules{Resolver: r}
	_, _ = rules.CheckURL(context.Background(), "https://hooks.acme.test/")
	_, _ = rules.CheckURL(context.Background(), "https://93.184.215.14/")
	_, _ = rules.CheckURL(context.Background(), "https://user@hooks.acme.test/")
	_, _ = rules.CheckURL(context.Background(), "https://localhost/")
	if strings.Join(r.asked, ",") != "hooks.acme.test" {
		t.Errorf("looked up %q; want only hooks.acme.test", r.asked)
	}

	for name, lookupErr := range map[string]error{
		"timeout":   &net.DNSError{Err: "i/o timeout", Name: "hooks.acme.test", IsTimeout: true},
		"temporary": &net.DNSError{Err: "server misbehaving", Name: "hooks.acme.test", IsTemporary: true},
	} {
		_, err := egress.Rules{Resolver: &fakeResolver{err: lookupErr}}.CheckURL(context.Background(), "https://hooks.acme.test/")
		var e *errs.Error
		if !errors.As(err, &e) || e.Code != errs.CodeUnavailable {
			t.Errorf("%s: %v; want %s", name, err, errs.CodeUnavailable)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := egress.Rules{Resolver: &fakeResolver{err: context.Canceled}}.CheckURL(ctx, "https://hooks.acme.test/")
	if !errors.Is(err, errs.New(errs.CodeUnavailable, "")) {
		t.Errorf("cancelled: %v; want %s", err, errs.CodeUnavailable)
	}
}

// TestRefused: the one classification table, read directly: a zone does
// not hide an address, and public addresses are not refused.
func TestRefused(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"fe80::1%eth0":       "link-local",
		"::1%lo":             "loopback",
		"::ffff:127.0.0.1":   "loopback",
		"64:ff9b::10.1.2.3":  "private",
		"93.184.215.14":      "",
		"8.8.8.8":            "",
		"2606:4700::1111":    "",
		"2a00:1450::1":       "",
		"::ffff:8.8.8.8":     "",
		"64:ff9b::8.8.8.8":   "",
		"100.63.255.255":     "",
		"100.128.0.0":        "",
		"172.15.255.255":     "",
		"172.32.0.0":         "",
		"198.17.255.255":     "",
		"198.20.0.0":         "",
		"223.255.255.255":    "",
		"169.254.169.253":    "link-local",
		"1.1.1.1":            "",
		"192.0.1.255":        "",
		"192.0.3.0":          "",
		"2001:200::1":        "",
		"2001:1ff::1":        "IETF protocol assignment",
		"2620:4f:8000::1":    "AS112",
		"fd00:ec2::254%eth0": "cloud metadata",
		"168.63.129.16":      "cloud metadata",
		"168.63.129.15":      "",
		"168.63.129.17":      "",
	} {
		why, refused := egress.Refused(netip.MustParseAddr(addr))
		if refused != (want != "") || !strings.Contains(why, want) {
			t.Errorf("Refused(%s) = %q, %v; want %q", addr, why, refused, want)
		}
	}
}

// TestDocumentationNames: a name RFC 2606 reserves for documentation is
// accepted as it stands with DNS unavailable, and is never looked up; a
// name that only looks like one is looked up as any other, and the other
// rules still apply to the URL.
func TestDocumentationNames(t *testing.T) {
	t.Parallel()
	down := &fakeResolver{err: &net.DNSError{Err: "server misbehaving", Name: "any", IsTemporary: true}}
	rules := egress.Rules{Resolver: down}
	for _, raw := range []string{
		"https://hooks.example.com/agentbus", "https://hooks.example.com/every-event", "http://example.com/",
		"https://Hooks.Example.NET:8443/x", "https://a.b.example.org/", "https://hooks.example/x", "http://example/",
	} {
		if _, err := rules.CheckURL(context.Background(), raw); err != nil {
			t.Errorf("%s: %v; want accepted with DNS unavailable", raw, err)
		}
	}
	if len(down.asked) != 0 {
		t.Errorf("looked up %q; want no lookup", down.asked)
	}
	for _, raw := range []string{"https://example.com.acme.test/", "https://notexample.com/", "https://example.co/", "https://examples/"} {
		_, err := rules.CheckURL(context.Background(), raw)
		if !errors.Is(err, errs.New(errs.CodeUnavailable, "")) {
			t.Errorf("%s: %v; want it looked up (SERVICE_UNAVAILABLE with DNS down)", raw, err)
		}
	}
	for raw, why := range map[string]string{
		"https://user:pw@hooks.example.com/": "user information",
		"ftp://hooks.example.com/":           `scheme "ftp"`,
		"https://hooks.example.com./":        "ends in a dot",
	} {
		if reason := rejection(t, mustFail(t, rules, raw)); !strings.Contains(reason, why) {
			t.Errorf("%s: reason %q; want it to say %q", raw, reason, why)
		}
	}
}

func mustFail(t *testing.T, rules egress.Rules, raw string) error {
	t.Helper()
	_, err := rules.CheckURL(context.Background(), raw)
	if err == nil {
		t.Fatalf("%s: accepted", raw)
	}
	return err
}
