package main

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
)

// TestMain clears every AGENTBUS_* variable before the tests run: loadConfig
// reads them, and a developer's settings (AGENTBUS_NATS_URL above all) would
// otherwise send the tests' traffic to servers they did not start. The
// binary TestHelp builds is removed at the end.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "AGENTBUS_") {
			os.Unsetenv(name)
		}
	}
	testkit.Main(m)
}

// TestServeBusyPort: when the HTTP address is taken, serve stops with an
// error that says how to choose another one.
func TestServeBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = run(ctx, []string{"serve", "--listen", ln.Addr().String(), "--data", t.TempDir(), "--nats-listen", "", "--ops-listen", "127.0.0.1:0"}, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("serve started on a busy address")
	}
	for _, want := range []string{ln.Addr().String(), "--listen", "AGENTBUS_LISTEN"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
