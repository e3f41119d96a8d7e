package server

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestBoundPublicURL: without publicUrl, rest.endpoint keeps the configured
// host; only a port 0 is replaced by the port actually bound, and a
// wildcard listen address is never announced as the bound [::].
func TestBoundPublicURL(t *testing.T) {
	tcp := func(s string) net.Addr {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, c := range []struct {
		listen string
		bound  net.Addr
		want   string
	}{
		{"0.0.0.0:8080", tcp("[::]:8080"), ""},
		{"127.0.0.1:8080", tcp("127.0.0.1:8080"), ""},
		{"127.0.0.1:0", tcp("127.0.0.1:41234"), "http://127.0.0.1:41234"},
		{"localhost:0", tcp("127.0.0.1:41234"), "http://localhost:41234"},
		{"[::1]:0", tcp("[::1]:41234"), "http://[::1]:41234"},
		{"0.0.0.0:0", tcp("[::]:41234"), "http://0.0.0.0:41234"},
	} {
		if got := boundPublicURL(c.listen, c.bound); got != c.want {
			t.Errorf("boundPublicURL(%q, %v) = %q, want %q", c.listen, c.bound, got, c.want)
		}
	}
}

// TestBodyLimitFitsMaxPayload: the body limit leaves a command and its
// events room under the NATS server's max_payload, lowered where the
// configured one would not.
func TestBodyLimitFitsMaxPayload(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct{ configured, maxPayload, want int64 }{
		{1 << 20, payloadHeadroom + 1024, 1024},      // just enough
		{1 << 20, 8 << 20, 1 << 20},                  // the embedded server's 8 MiB
		{1 << 20, 1 << 20, 1<<20 - payloadHeadroom},  // nats-server's default 1 MiB
		{64 << 20, 8 << 20, 8<<20 - payloadHeadroom}, // more than any server takes
		{4096, 1 << 20, 4096},                        // small is kept
		{1 << 20, 0, 1 << 20},                        // not known
	} {
		if got, err := bodyLimit(c.configured, c.maxPayload, log); got != c.want || err != nil {
			t.Errorf("bodyLimit(%d, %d) = %d, %v, want %d", c.configured, c.maxPayload, got, err, c.want)
		}
	}
	// A server with room for less than 1 KiB of body is refused, not given
	// a limit of 0 or less (which would mean "the default").
	for _, maxPayload := range []int64{payloadHeadroom + 1023, payloadHeadroom, 4096} {
		if got, err := bodyLimit(1<<20, maxPayload, log); err == nil || !strings.Contains(err.Error(), "raise max_payload") {
			t.Errorf("bodyLimit(1 MiB, %d) = %d, %v, want an error", maxPayload, got, err)
		}
	}
}

func TestOwnHosts(t *testing.T) {
	cfg := settings.Default()
	cfg.Listen, cfg.PublicURL = "bus.internal:8080", "https://Bus.Example.com/api"
	got := fmt.Sprint(ownHosts(cfg))
	if got != "[localhost Bus.Example.com bus.internal]" {
		t.Errorf("ownHosts = %s", got)
	}
}
