package natsjs_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/nats-io/nats.go"
)

// TestEmbeddedListenInUse: when something already listens on the embedded
// server's client address, Connect fails with an error naming the address
// and the setting, instead of waiting for a server that cannot start.
func TestEmbeddedListenInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	// Well under the embedded server's own 30s wait: without the early
	// check Connect gives up at this deadline with an error that does not
	// name the address.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := natsjs.Connect(ctx, natsjs.Config{DataDir: t.TempDir(), Listen: addr}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		conn.Close()
		t.Fatalf("Connect with %s taken succeeded", addr)
	}
	for _, want := range []string{addr, "in use", "nats.listen"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestEmbeddedRandomPort: port -1 (nats-server's "any free port", as tests
// use it) starts without the in-use check getting in the way.
func TestEmbeddedRandomPort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := natsjs.Connect(ctx, natsjs.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("Connect on 127.0.0.1:-1: %v", err)
	}
	defer conn.Close()
	if conn.ClientURL() == "" {
		t.Error("no client URL for a listening embedded server")
	}
	// The in-process pipe gets no write deadline (a timer set and cleared
	// on every flush); a connection dialled over the network keeps
	// nats.go's.
	if d := conn.NC.Opts.FlusherTimeout; d != 0 {
		t.Errorf("in-process connection: flusher timeout %s, want none", d)
	}
	ext, err := natsjs.Connect(ctx, natsjs.Config{URL: conn.ClientURL()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	if d := ext.NC.Opts.FlusherTimeout; d != nats.DefaultFlusherTimeout {
		t.Errorf("network connection: flusher timeout %s, want nats.go's %s", d, nats.DefaultFlusherTimeout)
	}
}

// TestDataDirIsLocked: a second embedded server on a data dir in use is
// refused at once with a message naming the dir and the holder; once the
// first is closed the dir can be opened again.
func TestDataDirIsLocked(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := natsjs.Connect(ctx, natsjs.Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	_, err = natsjs.Connect(ctx, natsjs.Config{DataDir: dir}, log)
	if err == nil || !strings.Contains(err.Error(), dir+" is in use by process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second server on the same dir: %v, want in use by this process", err)
	}
	first.Close()
	again, err := natsjs.Connect(ctx, natsjs.Config{DataDir: dir}, log)
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	again.Close()
}
