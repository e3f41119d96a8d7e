package main

import (
	"context"
	"io"
	"net/http"
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
		served <- run(ctx, append([]string{"serve", "--listen", httpAddr, "--ops-listen", "127.0.0.1:0"}, args...), io.Discard, serveLog)
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
