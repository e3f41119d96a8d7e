// agentbus against an external nats-server process that is stopped and
// started again under it.

package cluster_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
)

// startNATSProcess runs nats-server (natsBin) with JetStream on 127.0.0.1
// port, storing in dir, and returns once it accepts connections.
func startNATSProcess(t *testing.T, natsBin string, port int, dir string) *testkit.Process {
	t.Helper()
	p := testkit.StartProcess(t, "nats-server", natsBin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir, "-n", "solo")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	testkit.EventuallyWithin(t, "nats-server to accept connections", time.Minute, func() bool {
		if p.Exited() {
			t.Fatalf("nats-server exited: %v", p.Wait())
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return p
}

// readyz returns the status of GET /readyz on the operations listener at
// addr, 0 for no answer.
func readyz(addr string) int {
	res, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// TestNATSDown: with its external nats-server stopped, a running agentbus
// answers /readyz 503 within 5 s and, once its connection is seen down,
// POST /commands 503 SERVICE_UNAVAILABLE with Retry-After at once (within
// 1.5 s: not the store's 5-s retry budget, never a 500, never a hang);
// commands sent all along, across the stop and the start, are answered
// 202 or 503 with Retry-After and nothing else. When the server is back,
// agentbus serves again without a restart, and every command acknowledged
// (202), before, during or after the outage, shows its event.
func TestNATSDown(t *testing.T) {
	natsBin, agentbusBin := testkit.BuildNATSServer(t), testkit.BuildAgentbus(t)
	port, store := testkit.FreePort(t), t.TempDir()
	nats := startNATSProcess(t, natsBin, port, store)
	api, ops := testkit.FreeAddr(t), testkit.FreeAddr(t)
	ab := testkit.StartProcess(t, "agentbus", agentbusBin, "serve", "--nats-url", fmt.Sprintf("nats://127.0.0.1:%d", port),
		"--listen", api, "--ops-listen", ops, "--data", t.TempDir())
	base := "http://" + api
	testkit.EventuallyWithin(t, "/readyz 200", time.Minute, func() bool {
		if ab.Exited() {
			t.Fatalf("agentbus exited: %v", ab.Wait())
		}
		return readyz(ops) == http.StatusOK
	})
	var (
		mu    sync.Mutex
		acked []*command
		wrong []attempt // neither 202 nor 503 with Retry-After
	)
	send := func(phase string) attempt {
		c := newCommand(phase)
		body, _ := json.Marshal(c.env)
		a := post(base, 0, body)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case a.status == http.StatusAccepted:
			acked = append(acked, c)
		case a.status != http.StatusServiceUnavailable || a.code != "SERVICE_UNAVAILABLE" || !a.specErr || a.retry == "":
			wrong = append(wrong, a)
		}
		return a
	}
	for range 3 {
		if a := send("before"); a.status != http.StatusAccepted {
			t.Fatalf("POST /commands with NATS up: %s", a)
		}
	}
	// A caller that keeps sending through the outage, one command after
	// the other, until the end.
	stopSending := make(chan struct{})
	sent := make(chan int)
	go func() {
		n := 0
		defer func() { sent <- n }()
		for {
			select {
			case <-stopSending:
				return
			default:
			}
			send("throughout")
			n++
			time.Sleep(20 * time.Millisecond)
		}
	}()

	if err := nats.Stop(t, 30*time.Second); err != nil {
		t.Logf("nats-server stopped: %v", err)
	}
	stopped := time.Now()
	testkit.EventuallyWithin(t, "/readyz 503 with NATS stopped", 5*time.Second, func() bool {
		return readyz(ops) == http.StatusServiceUnavailable
	})
	t.Logf("/readyz 503 %s after NATS stopped", time.Since(stopped).Round(time.Millisecond))
	for range 3 {
		a := send("down")
		if a.status != http.StatusServiceUnavailable || a.code != "SERVICE_UNAVAILABLE" || !a.specErr || a.retry == "" {
			t.Fatalf("POST /commands with NATS stopped: %s (want 503 SERVICE_UNAVAILABLE with Retry-After)", a)
		}
		// The connection is known down: no retry budget to wait out, only
		// the request's own way through agentbus (a generous bound).
		if a.dur > 1500*time.Millisecond {
			t.Errorf("POST /commands with NATS known down took %s, want 503 at once", a.dur)
		}
		t.Logf("with NATS stopped: %s", a)
	}
	if ab.Exited() {
		t.Fatalf("agentbus exited with NATS stopped: %v", ab.Wait())
	}

	startNATSProcess(t, natsBin, port, store)
	back := time.Now()
	testkit.EventuallyWithin(t, "/readyz 200 with NATS back", time.Minute, func() bool {
		return readyz(ops) == http.StatusOK
	})
	t.Logf("/readyz 200 %s after NATS came back", time.Since(back).Round(time.Millisecond))
	testkit.EventuallyWithin(t, "POST /commands 202 with NATS back", 30*time.Second, func() bool {
		return send("after").status == http.StatusAccepted
	})
	close(stopSending)
	t.Logf("the caller sending throughout sent %d commands", <-sent)
	mu.Lock()
	defer mu.Unlock()
	for _, a := range wrong {
		t.Errorf("POST /commands answered neither 202 nor 503 with Retry-After: %s", a)
	}
	phases := map[string]int{}
	for _, c := range acked {
		phases[c.phase]++
		testkit.EventuallyWithin(t, "the event of command "+c.orderID, 30*time.Second, func() bool {
			p, _, err := getPage(base, "/events?correlationId="+c.corr)
			return err == nil && len(p.Events) == 1 && p.Events[0]["type"] == "OrderPlaced"
		})
	}
	t.Logf("acknowledged commands, each found in the log: %v", phases)
	if ab.Exited() {
		t.Fatalf("agentbus exited: %v", ab.Wait())
	}
}
