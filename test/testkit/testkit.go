// Package testkit is the scaffolding the agentbus test suites share:
// building the agentbus binaries, free loopback ports, child processes,
// in-process nats-servers and agentbus instances, and polling.
//
// Only tests import it (TestImportedOnlyByTests checks that). Every helper
// takes the test's testing.TB, fails it on setup errors with t.Fatal and
// releases what it started with t.Cleanup, so callers need no teardown.
package testkit

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The binaries Build built, by command name, in one directory per test
// binary.
var (
	buildMu   sync.Mutex
	buildDir  string
	buildErrs = map[string]error{}
	binaries  = map[string]string{}
)

// BuildAgentbus builds cmd/agentbus once per test binary and returns the
// path of the executable (Build "agentbus").
func BuildAgentbus(t testing.TB) string {
	t.Helper()
	return Build(t, "agentbus")
}

// Build builds cmd/<name> once per test binary and returns the path of the
// executable; later calls return the same path. It fails t when the build
// fails (every later call fails too). `go test` puts $GOROOT/bin first on
// PATH, so the toolchain running the tests builds it. Safe for concurrent
// use. Packages that call it remove the binaries with Main.
func Build(t testing.TB, name string) string {
	t.Helper()
	return buildOnce(t, name, "github.com/agentbus/agentbus/cmd/"+name)
}

// BuildNATSServer builds nats-server, of the version go.mod requires, once
// per test binary and returns the path of the executable, as Build does:
// a real nats-server process for tests that stop and start it under
// agentbus.
func BuildNATSServer(t testing.TB) string {
	t.Helper()
	return buildOnce(t, "nats-server", "github.com/nats-io/nats-server/v2")
}

// buildOnce builds package pkg into an executable called name, once.
func buildOnce(t testing.TB, name, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := binaries[name]; ok {
		return bin
	}
	err, failed := buildErrs[name]
	if !failed {
		err = build(name, pkg)
		buildErrs[name] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return binaries[name]
}

// build builds package pkg into buildDir/name; buildMu is held.
func build(name, pkg string) error {
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "agentbus-testkit-")
		if err != nil {
			return err
		}
		buildDir = dir
	}
	bin := filepath.Join(buildDir, name)
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	binaries[name] = bin
	return nil
}

// Main runs m's tests, removes the binaries Build built (if any) and exits
// with m's exit code. Call it as the whole of TestMain in packages that use
// Build or BuildAgentbus.
func Main(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// portsGiven holds every port FreePort returned in this process: the kernel
// may hand a just-closed port out again at once, and two callers given the
// same port would clash with each other rather than with anyone else.
var portsGiven = struct {
	sync.Mutex
	seen map[int]bool
}{seen: map[int]bool{}}

// FreePort returns a 127.0.0.1 TCP port nobody listens on right now and
// that no earlier call in this process returned. It fails t when no port can
// be had. Another process may take the port before the caller binds it;
// tests accept that small race.
func FreePort(t testing.TB) int {
	t.Helper()
	portsGiven.Lock()
	defer portsGiven.Unlock()
	for range 1000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if !portsGiven.seen[port] {
			portsGiven.seen[port] = true
			return port
		}
	}
	t.Fatal("no loopback port left that was not given out before")
	return 0
}

// FreeAddr returns "127.0.0.1:port" for a FreePort.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// Every calls fn(0) now and fn(n) each period after, on a goroutine of its
// own, until the test ends; the cleanup waits for the call under way. fn
// must not use t's failing methods.
func Every(t testing.TB, period time.Duration, fn func(n int)) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for n := 0; ; n++ {
			fn(n)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
}

// Eventually calls cond every 20ms until it returns true, and fails t with
// "timed out waiting for <what>" when it has not after 10s. cond runs on the
// calling goroutine, so it may use t.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, what, 10*time.Second, cond)
}

// EventuallyWithin is Eventually with its own time limit, for a promise
// about time ("revoked within a second").
func EventuallyWithin(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (%s)", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
