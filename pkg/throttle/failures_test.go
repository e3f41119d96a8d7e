package throttle_test

import (
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/throttle"
)

func TestParseProxies(t *testing.T) {
	t.Parallel()
	got, err := throttle.ParseProxies([]string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::ffff:198.51.100.1", "10.1.2.3/8"})
	if err != nil {
		t.Fatal(err)
	}
	want := "[10.0.0.0/8 192.0.2.7/32 2001:db8::/32 198.51.100.1/32 10.0.0.0/8]"
	if s := fmtPrefixes(got); s != want {
		t.Fatalf("got %s, want %s", s, want)
	}
	for _, bad := range []string{"", "10.0.0.0/33", "example.com", "fe80::1%eth0"} {
		if _, err := throttle.ParseProxies([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func fmtPrefixes[T interface{ String() string }](ps []T) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}
