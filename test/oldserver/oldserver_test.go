// Package oldserver_test runs the agentbus binary against nats-servers it
// must refuse (Debian's 2.9, a server without JetStream) and against a
// current one it must accept (README: nats-server 2.12 or newer; older refused
// with a clear message, never trusted).
package oldserver_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats-server/v2/server"
)

func TestMain(m *testing.M) { testkit.Main(m) }

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
	addr := testkit.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	args := []string{"-a", "127.0.0.1", "-p", port}
	if js {
		args = append(args, "-js", "-sd", t.TempDir())
	}
	p := testkit.StartProcess(t, "nats-server", bin, args...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return "nats://" + addr
		}
		if p.Exited() {
			t.Fatalf("%s %v exited: %s", bin, args, p.Output())
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
	return testkit.NATSServer(t, func(o *server.Options) { o.JetStream = js })
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
	cmd := exec.CommandContext(ctx, testkit.BuildAgentbus(t), "serve", "--nats-url", natsURL,
		"--listen", testkit.FreeAddr(t), "--data", t.TempDir())
	cmd.Env = testkit.ProcessEnv() // no AGENTBUS_* setting of the caller's
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
	testkit.BuildAgentbus(t)

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

// TestCurrentServerAccepted is the positive control: against a current
// nats-server with JetStream the binary serves, and SIGTERM stops it
// gracefully with exit 0 and "stopped" logged.
func TestCurrentServerAccepted(t *testing.T) {
	t.Parallel()
	natsURL := startCurrentServer(t, true)
	listen := testkit.FreeAddr(t)
	p := testkit.StartProcess(t, "agentbus", testkit.BuildAgentbus(t), "serve", "--nats-url", natsURL, "--listen", listen, "--data", t.TempDir())
	p.WaitHTTP(t, "http://"+listen+"/.well-known/agentproto")
	if err := p.Stop(t, 20*time.Second); err != nil {
		t.Fatalf("agentbus exit after SIGTERM = %v, want 0", err)
	}
	out := p.Output()
	if !regexp.MustCompile(`(?m)\bmsg=stopped\b`).MatchString(out) {
		t.Fatalf("no \"stopped\" log line after SIGTERM:\n%s", out)
	}
	if strings.Contains(out, "agentbus: ") {
		t.Errorf("error line after a graceful stop:\n%s", out)
	}
}
