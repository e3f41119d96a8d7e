package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/opsport"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/test/testkit"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// probe GETs path on the operations listener at addr: its status and, for
// /readyz, its report. Status 0 means no answer.
func probe(addr, path string) (int, opsport.Report, string) {
	client := &http.Client{Timeout: 2 * time.Second}
	res, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, opsport.Report{}, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var rep opsport.Report
	_ = json.Unmarshal(b, &rep)
	return res.StatusCode, rep, string(b)
}

// TestServeWaitsForNATS: serve against a NATS server that is not there
// yet does not exit. Its operations listener answers /healthz 200 at once
// and /readyz 503 naming nats as not ready; once the server starts,
// agentbus comes up on it without a restart and /readyz answers 200 with
// every check ready.
func TestServeWaitsForNATS(t *testing.T) {
	first, try := server.Backoff.First, server.Backoff.Try
	server.Backoff.First, server.Backoff.Try = 100*time.Millisecond, time.Second
	defer func() { server.Backoff.First, server.Backoff.Try = first, try }()
	natsPort := testkit.FreePort(t)
	opsAddr := testkit.FreeAddr(t)
	apiAddr := testkit.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	var serveLog testkit.LockedBuffer
	go func() {
		served <- run(ctx, []string{"serve", "--listen", apiAddr, "--ops-listen", opsAddr, "--data", t.TempDir(),
			"--nats-url", fmt.Sprintf("nats://127.0.0.1:%d", natsPort)}, io.Discard, &serveLog)
	}()
	exited := func() bool {
		select {
		case err := <-served:
			t.Fatalf("serve exited while waiting for NATS: %v\n%s", err, serveLog.String())
			return true
		default:
			return false
		}
	}
	testkit.EventuallyWithin(t, "/healthz 200", 30*time.Second, func() bool {
		code, _, _ := probe(opsAddr, "/healthz")
		return code == http.StatusOK || exited()
	})
	var (
		code int
		rep  opsport.Report
		body string
	)
	testkit.EventuallyWithin(t, "/readyz to say agentbus waits for NATS", 30*time.Second, func() bool {
		code, rep, body = probe(opsAddr, "/readyz")
		return strings.Contains(body, `"name":"nats","ready":false,"reason":"`) && !strings.Contains(body, `"name":"nats","ready":false,"reason":"pending"`) || exited()
	})
	if code != http.StatusServiceUnavailable || rep.Ready {
		t.Fatalf("/readyz without NATS: %d %s", code, body)
	}
	for _, c := range rep.Checks {
		if c.Name == "nats" && (c.Ready || c.Reason == "") {
			t.Fatalf("/readyz without NATS: the nats check is ready or has no reason: %s", body)
		}
		if c.Name == "catalog" && !c.Ready {
			t.Fatalf("/readyz: the catalogue is loaded before NATS is reached: %s", body)
		}
	}
	if !strings.Contains(body, `"name":"nats"`) {
		t.Fatalf("/readyz does not name nats: %s", body)
	}
	// Past several tries (each shortened here), serve still waits, and
	// the API is not served meanwhile.
	testkit.EventuallyWithin(t, "a second try", 30*time.Second, func() bool {
		return strings.Contains(serveLog.String(), "try=2") || exited()
	})
	if res, err := http.Get("http://" + apiAddr + "/.well-known/agentproto"); err == nil {
		res.Body.Close()
		t.Fatalf("the API answers %d before NATS is reached", res.StatusCode)
	}
	exited()

	testkit.NATSServer(t, func(o *natsserver.Options) { o.Port = natsPort })
	testkit.EventuallyWithin(t, "/readyz 200 once NATS is up", 90*time.Second, func() bool {
		code, _, _ := probe(opsAddr, "/readyz")
		return code == http.StatusOK || exited()
	})
	code, rep, body = probe(opsAddr, "/readyz")
	if code != http.StatusOK || !rep.Ready || len(rep.Checks) < 4 {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	res, err := http.Get("http://" + apiAddr + "/.well-known/agentproto")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("the API once ready: %v %v", res, err)
	}
	res.Body.Close()
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	// The listener stops with serve.
	if code, _, _ := probe(opsAddr, "/healthz"); code != 0 {
		t.Fatalf("/healthz answers %d after serve returned", code)
	}
}

// TestReadyzStreamsLive: /readyz keeps asking about the streams and
// buckets while agentbus runs. A bucket and a stream deleted under it on
// its nats-server turn /readyz 503 within a few seconds, the streams check
// naming each; agentbus streams apply creates them again, and /readyz is
// 200 once more without a restart.
func TestReadyzStreamsLive(t *testing.T) {
	url := testkit.NATSServer(t)
	opsAddr, apiAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	var serveLog testkit.LockedBuffer
	go func() {
		served <- run(ctx, []string{"serve", "--listen", apiAddr, "--ops-listen", opsAddr, "--data", t.TempDir(), "--nats-url", url},
			io.Discard, &serveLog)
	}()
	exited := func() bool {
		select {
		case err := <-served:
			t.Fatalf("serve exited: %v\n%s", err, serveLog.String())
			return true
		default:
			return false
		}
	}
	testkit.EventuallyWithin(t, "/readyz 200", time.Minute, func() bool {
		code, _, _ := probe(opsAddr, "/readyz")
		return code == http.StatusOK || exited()
	})

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if err := js.DeleteKeyValue(dctx, "AGENTBUS_KEYS"); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(dctx, "AGENTBUS_SYNTHETIC"); err != nil {
		t.Fatal(err)
	}
	var (
		code int
		rep  opsport.Report
		body string
	)
	testkit.EventuallyWithin(t, "/readyz 503 with a bucket and a stream deleted", 15*time.Second, func() bool {
		code, rep, body = probe(opsAddr, "/readyz")
		return code == http.StatusServiceUnavailable || exited()
	})
	var streams *opsport.Check
	for i, c := range rep.Checks {
		if c.Name == server.ReadyStreams {
			streams = &rep.Checks[i]
		} else if !c.Ready {
			t.Errorf("/readyz: %s not ready besides the streams: %s", c.Name, body)
		}
	}
	if streams == nil || streams.Ready || !strings.Contains(streams.Reason, "bucket AGENTBUS_KEYS") ||
		!strings.Contains(streams.Reason, "stream AGENTBUS_SYNTHETIC") || !strings.Contains(streams.Reason, "streams apply") {
		t.Fatalf("/readyz with AGENTBUS_KEYS and AGENTBUS_SYNTHETIC deleted: %d %s", code, body)
	}

	var out bytes.Buffer
	if err := run(ctx, []string{"streams", "apply", "--nats-url", url}, &out, io.Discard); err != nil {
		t.Fatalf("streams apply: %v\n%s", err, out.String())
	}
	testkit.EventuallyWithin(t, "/readyz 200 after streams apply", 15*time.Second, func() bool {
		code, _, body = probe(opsAddr, "/readyz")
		return code == http.StatusOK || exited()
	})
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
}
