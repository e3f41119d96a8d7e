package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
)

// startServe runs `agentbus serve` with args and HTTP on a free loopback
// address, and returns once it answers HTTP (serving, not merely
// listening: serve listens first and declares its consumers after). It
// returns serve's HTTP address, its log, and stop, which ends serve and
// returns its error. A start that fails or hangs fails t with the log.
func startServe(t *testing.T, args ...string) (httpAddr string, serveLog *testkit.LockedBuffer, stop func() error) {
	t.Helper()
	httpAddr = testkit.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	serveLog = &testkit.LockedBuffer{}
	go func() {
		served <- run(ctx, append([]string{"serve", "--listen", httpAddr}, args...), io.Discard, serveLog)
	}()
	var once sync.Once
	var serveErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			serveErr = <-served
		})
		return serveErr
	}
	t.Cleanup(func() { _ = stop() })
	client := &http.Client{Timeout: 2 * time.Second} // a stuck start fails below, with its log
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-served:
			served <- err
			t.Fatalf("serve ended before serving: %v\n%s", err, serveLog.String())
		default:
		}
		if res, err := client.Get("http://" + httpAddr + "/.well-known/agentproto"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return httpAddr, serveLog, stop
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", serveLog.String())
		}
	}
}

// TestServeAfterTheCatalogueChanges: serve starts again on the same store
// after the catalogue gained a command type left to agents (the example
// agent's: the command receipts consumer goes from one filter subject to
// two) and after it lost it again.
func TestServeAfterTheCatalogueChanges(t *testing.T) {
	dir := t.TempDir()
	t.Chdir("../..") // the example config names its catalogues from the repository root
	for _, extra := range [][]string{nil, {"--config", "cmd/example-agent/agentbus.yaml"}, nil} {
		_, _, stop := startServe(t, append([]string{"--data", dir, "--nats-listen", ""}, extra...)...)
		if err := stop(); err != nil {
			t.Fatalf("serve %q: %v", extra, err)
		}
	}
}

// TestFailedServeLeavesNoDataDir: a serve that cannot start leaves no
// trace of the data dir it made — whether its HTTP address or its NATS
// address is taken — and, on a store that existed, leaves that store as
// it was.
func TestFailedServeLeavesNoDataDir(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	taken := busy.Addr().String()
	parent := t.TempDir()
	for name, args := range map[string][]string{
		"HTTP address taken": {"--listen", taken, "--nats-listen", ""},
		"NATS address taken": {"--listen", testkit.FreeAddr(t), "--nats-listen", taken},
	} {
		data := filepath.Join(parent, "new", "data")
		err := run(context.Background(), append([]string{"serve", "--data", data}, args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("%s: serve: %v, want an address in use", name, err)
		}
		if _, err := os.Lstat(filepath.Join(parent, "new")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: the failed serve left %s (%v)", name, filepath.Join(parent, "new"), err)
		}
	}

	// A store that exists: a failed start changes nothing of it.
	data := t.TempDir()
	_, _, stop := startServe(t, "--data", data, "--nats-listen", "")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	before := tree(t, data)
	if err := run(context.Background(), []string{"serve", "--data", data, "--listen", taken, "--nats-listen", ""}, io.Discard, io.Discard); err == nil {
		t.Fatal("serve on a taken address started")
	}
	if after := tree(t, data); !slices.Equal(before, after) {
		t.Errorf("a failed start changed the existing store:\nbefore %q\nafter  %q", before, after)
	}
}

// tree lists the paths under dir.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		out = append(out, p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
