package testkit

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a child process started by StartProcess. Its methods are safe
// for concurrent use.
type Process struct {
	name string
	cmd  *exec.Cmd
	out  LockedBuffer
	done chan struct{} // closed once the process has exited
	err  error         // cmd.Wait's result, set before done closes
}

// StartProcess starts bin with args, its standard output and error
// collected together (see Output); name labels it in failure messages. The
// child inherits the test's environment except every AGENTBUS_* variable, so
// a developer's agentbus settings (AGENTBUS_NATS_URL, AGENTBUS_CONFIG, ...)
// never reach it. It fails t when the process cannot be started. When t
// ends, a process still running is killed with SIGKILL and waited for, and
// if t failed its output is logged.
func StartProcess(t testing.TB, name, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = ProcessEnv()
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.Exited() {
			_ = p.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s output ---\n%s", name, p.Output())
		}
	})
	return p
}

// ProcessEnv returns the environment StartProcess gives a child: the
// test's own without its AGENTBUS_* variables, and with
// AGENTBUS_OPS_LISTEN=127.0.0.1:0, so that agentbus processes started side
// by side do not contend for the operations listener's default port
// (a test that reads that listener passes --ops-listen). Set it as
// exec.Cmd.Env when starting agentbus without StartProcess.
func ProcessEnv() []string { return append(childEnv(os.Environ()), "AGENTBUS_OPS_LISTEN=127.0.0.1:0") }

// childEnv returns environ without its AGENTBUS_* entries: a non-nil result
// even when that is empty, since a nil exec.Cmd.Env would inherit the whole
// environment.
func childEnv(environ []string) []string {
	env := make([]string, 0, len(environ))
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "AGENTBUS_") {
			env = append(env, kv)
		}
	}
	return env
}

// Kill sends SIGKILL and returns without waiting for the exit (see Wait).
// It returns the error of sending the signal (os.ErrProcessDone once the
// process has been waited for).
func (p *Process) Kill() error { return p.cmd.Process.Kill() }

// Wait blocks until the process has exited and returns cmd.Wait's error:
// nil for exit status 0, an *exec.ExitError otherwise.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits up to timeout for the process to exit, then
// returns cmd.Wait's error (nil for exit status 0). It fails t when the
// signal cannot be sent or the process is still running after timeout.
func (p *Process) Stop(t testing.TB, timeout time.Duration) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		t.Fatalf("%s did not stop within %v of SIGTERM", p.name, timeout)
		return nil
	}
}

// Output returns what the process has written to its standard output and
// error so far.
func (p *Process) Output() string { return p.out.String() }

// WaitHTTP polls url with GET every 50ms until it answers 200 OK. It fails
// t when the process exits first or when 30s pass without a 200.
func (p *Process) WaitHTTP(t testing.TB, url string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if p.Exited() {
			t.Fatalf("%s exited before serving %s: %v", p.name, url, p.err)
		}
		res, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not serving %s after 30s (last error %v)", p.name, url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LockedBuffer is a bytes.Buffer safe for concurrent writes and reads, for
// the output of a child process or a test's logger.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the lines holding s.
func (l *LockedBuffer) Lines(s string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}
