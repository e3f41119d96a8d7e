package abuse_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
)

// Helpers of the connection, browser, echo and memory abuse tests (prefix
// edge).

const edgeBootstrap = "bootstrap-key-for-edge-abuse-tests-0123456789"

// edgeBuild builds cmd/agentbus into a directory of t's and returns the
// executable's path.
func edgeBuild(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentbus")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/agentbus/agentbus/cmd/agentbus").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// edgeProc is agentbus running as a child process on a loopback port.
type edgeProc struct {
	URL  string
	Addr string
	cmd  *exec.Cmd
	out  *testkit.LockedBuffer
	done chan struct{}
}

// edgeStart runs `agentbus serve` from bin on a fresh data directory and a
// free loopback port, in-process NATS only, with args after those. nofile,
// when positive, is the child's file-descriptor limit (soft and hard, set
// by the shell before it becomes agentbus). The child gets the test's
// environment without AGENTBUS_*, GOGC and GOMEMLIMIT, plus env. It waits
// until the manifest answers, and stops the child when t ends.
func edgeStart(t *testing.T, bin string, nofile int, env []string, args ...string) *edgeProc {
	t.Helper()
	addr := testkit.FreeAddr(t)
	argv := append([]string{"serve", "--listen", addr, "--data", t.TempDir(), "--nats-listen", ""}, args...)
	var cmd *exec.Cmd
	if nofile > 0 {
		// dash and bash set both limits when neither -S nor -H is given,
		// so the Go runtime cannot raise the soft one again.
		script := fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile)
		cmd = exec.Command("sh", append([]string{"-c", script, bin}, argv...)...)
	} else {
		cmd = exec.Command(bin, argv...)
	}
	for _, kv := range testkit.ProcessEnv() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	p := &edgeProc{URL: "http://" + addr, Addr: addr, cmd: cmd, out: &testkit.LockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			out := p.out.String()
			if len(out) > 20000 {
				out = "…" + out[len(out)-20000:]
			}
			t.Logf("--- agentbus output ---\n%s", out)
		}
	})
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for deadline := time.Now().Add(60 * time.Second); ; {
		select {
		case <-p.done:
			t.Fatalf("agentbus exited before serving:\n%s", p.out.String())
		default:
		}
		if res, err := client.Get(p.URL + "/.well-known/agentproto"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentbus did not serve within 60s:\n%s", p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rss is the child's resident memory in bytes (VmRSS), 0 once it is gone.
func (p *edgeProc) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// edgeRSSPeak samples p's RSS every 50ms until stop is closed and returns
// the highest it saw.
func edgeRSSPeak(p *edgeProc, stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		peak := p.rss()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				out <- max(peak, p.rss())
				return
			case <-tick.C:
				peak = max(peak, p.rss())
			}
		}
	}()
	return out
}

// edgeDialFrom dials addr from the loopback address local (e.g.
// "127.0.0.2"): every address of 127.0.0.0/8 is the loopback interface's,
// so one test can be several clients.
func edgeDialFrom(local, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return d.Dial("tcp", addr)
}

// edgeClientFrom is an HTTP client whose connections come from local, one
// per request, each request bounded by timeout.
func edgeClientFrom(local string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// edgeCode returns error.code of an error body, "" when b is not one.
func edgeCode(b []byte) string {
	var body struct {
		Error *struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &body); err != nil || body.Error == nil || body.Error.Message == "" || body.Error.Details == nil {
		return ""
	}
	return body.Error.Code
}
