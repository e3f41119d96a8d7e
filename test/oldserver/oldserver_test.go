// Package oldserver_test runs the agentbus binary against nats-servers it
// must refuse (Debian's 2.9, a server without JetStream) and against a
// current one it must accept (design §3: minimum nats-server 2.12, refused
// with a clear message, never trusted).
package oldserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

var (
	buildDir  string
	buildOnce sync.Once
	binary    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// agentbusBinary builds cmd/agentbus once per test binary and returns its
// path. `go test` puts $GOROOT/bin first on PATH, so "go" is the toolchain
// running the tests.
func agentbusBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "agentbus-oldserver-")
		if buildErr != nil {
			return
		}
		binary = filepath.Join(buildDir, "agentbus")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/agentbus/agentbus/cmd/agentbus").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// freePort returns a loopback port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return port
}

var versionRE = regexp.MustCompile(`v?(\d+)\.(\d+)\.(\d+)`)

// oldServer returns a nats-server binary older than 2.12 and its version:
// $NATS_SERVER_OLD, else /usr/sbin/nats-server, else nats-server on PATH.
// Without one the test is skipped, saying how to get it.
func oldServer(t *testing.T) (path, version string) {
	t.Helper()
	path = os.Getenv("NATS_SERVER_OLD")
	if path == "" {
		if st, err := os.Stat("/usr/sbin/nats-server"); err == nil && st.Mode()&0o111 != 0 {
			path = "/usr/sbin/nats-server"
		} else if p, err := exec.LookPath("nats-server"); err == nil {
			path = p
		}
	}
	if path == "" {
		t.Skip("no nats-server 2.9 binary (set NATS_SERVER_OLD, or install with: apt-get install nats-server; `make old-nats-server` does it)")
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v: %s", path, err, out)
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("%s --version printed no version: %s", path, out)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major > 2 || (major == 2 && minor >= 12) {
		t.Skipf("%s is nats-server %s, not an old (< 2.12) server; set NATS_SERVER_OLD to a 2.9 binary", path, m[0])
	}
	return path, strings.TrimPrefix(m[0], "v")
}

// startOldServer runs bin on a free loopback port, with JetStream when js
// is set, and returns its client URL once it accepts connections. Its own
// process, never a system service.
func startOldServer(t *testing.T, bin string, js bool) string {
	t.Helper()
	port := freePort(t)
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port)}
	if js {
		args = append(args, "-js", "-sd", t.TempDir())
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return "nats://" + addr
		}
		select {
		case <-done:
			t.Fatalf("%s %v exited: %s", bin, args, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %v not accepting connections after 10s", bin, args)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startCurrentServer runs the nats-server this module builds against
// in-process on a loopback port, with JetStream when js is set.
func startCurrentServer(t *testing.T, js bool) string {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true}
	if js {
		opts.JetStream, opts.StoreDir = true, t.TempDir()
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("in-process nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

// result is how an agentbus run ended.
type result struct {
	err     error // cmd.Wait's error; nil for exit 0
	stderr  string
	elapsed time.Duration
}

// runRefused runs `agentbus serve` against natsURL and returns once it
// exits; it fails the test if it is still running after 20s.
func runRefused(t *testing.T, natsURL string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, agentbusBinary(t), "serve", "--nats-url", natsURL,
		"--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))), "--data", t.TempDir())
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("agentbus still running after 20s against %s; it must refuse the server\n%s", natsURL, stderr.String())
	}
	return result{err: err, stderr: stderr.String(), elapsed: time.Since(start)}
}

// refusalLine checks r is a prompt non-zero exit and returns the single
// "agentbus: " line it printed, which must contain every one of want.
func refusalLine(t *testing.T, r result, want ...string) string {
	t.Helper()
	var exit *exec.ExitError
	if !errors.As(r.err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("agentbus exit = %v, want a non-zero exit\n%s", r.err, r.stderr)
	}
	if r.elapsed > 10*time.Second {
		t.Errorf("agentbus took %v to refuse the server, want a few seconds", r.elapsed)
	}
	if strings.Contains(r.stderr, "panic:") || strings.Contains(r.stderr, "goroutine ") {
		t.Errorf("agentbus crashed instead of refusing:\n%s", r.stderr)
	}
	var lines []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "agentbus: ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("want exactly one \"agentbus: \" error line, got %d:\n%s", len(lines), r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("error line does not mention %q: %s", w, lines[0])
		}
	}
	return lines[0]
}

func TestOldServerRefused(t *testing.T) {
	bin, version := oldServer(t)
	agentbusBinary(t)

	t.Run("jetstream", func(t *testing.T) {
		t.Parallel()
		r := runRefused(t, startOldServer(t, bin, true))
		line := refusalLine(t, r, version, "2.12")
		t.Logf("nats-server %s -js: exit %v after %v: %s", version, r.err, r.elapsed.Round(time.Millisecond), line)
	})
	t.Run("no jetstream", func(t *testing.T) {
		t.Parallel()
		r := runRefused(t, startOldServer(t, bin, false))
		line := refusalLine(t, r, "JetStream is not enabled", version)
		t.Logf("nats-server %s without -js: exit %v after %v: %s", version, r.err, r.elapsed.Round(time.Millisecond), line)
	})
}

// TestCurrentServerWithoutJetStreamRefused needs no extra binary: the
// in-process current server with JetStream off.
func TestCurrentServerWithoutJetStreamRefused(t *testing.T) {
	t.Parallel()
	r := runRefused(t, startCurrentServer(t, false))
	line := refusalLine(t, r, "JetStream is not enabled")
	t.Logf("current nats-server without JetStream: exit %v after %v: %s", r.err, r.elapsed.Round(time.Millisecond), line)
}

// lockedBuffer collects a child's stderr while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCurrentServerAccepted is the positive control: against a current
// nats-server with JetStream the binary serves, and SIGTERM stops it
// gracefully with exit 0 and "stopped" logged.
func TestCurrentServerAccepted(t *testing.T) {
	t.Parallel()
	natsURL := startCurrentServer(t, true)
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	stderr := &lockedBuffer{}
	cmd := exec.Command(agentbusBinary(t), "serve", "--nats-url", natsURL, "--listen", listen, "--data", t.TempDir())
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("--- agentbus output ---\n%s", stderr.String())
		}
	})

	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("agentbus exited against a current nats-server: %v", err)
		default:
		}
		res, err := client.Get("http://" + listen + "/.well-known/agentproto")
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentbus not serving after 30s (last error %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Fatalf("agentbus exit after SIGTERM = %v, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("agentbus did not stop within 20s of SIGTERM")
	}
	out := stderr.String()
	if !regexp.MustCompile(`(?m)\bmsg=stopped\b`).MatchString(out) {
		t.Fatalf("no \"stopped\" log line after SIGTERM:\n%s", out)
	}
	if strings.Contains(out, "agentbus: ") {
		t.Errorf("error line after a graceful stop:\n%s", out)
	}
}
