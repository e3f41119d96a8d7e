package main

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
)

// startServe runs "agentbus serve" with args on a free HTTP address and
// returns once it serves HTTP, not merely listens: serve listens first and
// declares its consumers after, and an update of their stream meanwhile
// trips a data race inside nats-server (stream update against consumer
// create). A serve that ends first fails t with its error and its log.
// stop ends serve and returns what it returned.
func startServe(t *testing.T, args ...string) (stop func() error) {
	t.Helper()
	httpAddr := testkit.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	var serveLog testkit.LockedBuffer
	go func() {
		served <- run(ctx, append([]string{"serve", "--listen", httpAddr}, args...), io.Discard, &serveLog)
	}()
	stop = func() error {
		cancel()
		return <-served
	}
	client := &http.Client{Timeout: 2 * time.Second} // a stuck start fails below, with its log
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-served:
			cancel()
			t.Fatalf("serve ended before serving: %v\n%s", err, serveLog.String())
		default:
		}
		if res, err := client.Get("http://" + httpAddr + "/.well-known/agentproto"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return stop
			}
		}
		if time.Now().After(deadline) {
			stop()
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
		stop := startServe(t, append([]string{"--data", dir, "--nats-listen", ""}, extra...)...)
		if err := stop(); err != nil {
			t.Fatalf("serve %q: %v", extra, err)
		}
	}
}
