package readme_test

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
)

// TestMakeRunStopsOnSIGTERM: a backgrounded `make run` stops with one
// SIGTERM to make (kill %1, kill <pid>): make passes it on to agentbus,
// which stops serving, and nothing is left behind.
func TestMakeRunStopsOnSIGTERM(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is not installed: the quick start's make run needs it")
	}
	addr := testkit.FreeAddr(t)
	dir := t.TempDir()
	cmd := exec.Command("make", "-s", "run", "BIN="+filepath.Join(dir, "agentbus"),
		"ARGS=--listen "+addr+" --data "+filepath.Join(dir, "data"))
	cmd.Dir = repoRoot
	cmd.Env = append(makeEnv(), "AGENTBUS_NATS_LISTEN=")
	out := &testkit.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // for the clean-up below only
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever make left
		<-done
	})
	client := &http.Client{Timeout: 2 * time.Second}
	serving := func() bool {
		res, err := client.Get("http://" + addr + "/.well-known/agentproto")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}
	for deadline := time.Now().Add(5 * time.Minute); !serving(); time.Sleep(200 * time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("make run ended before serving:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run does not serve on %s:\n%s", addr, out.String())
		}
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGTERM); err != nil { // make alone
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("make run did not end a minute after SIGTERM:\n%s", out.String())
	}
	// make has ended; agentbus must have too, not be left serving.
	for deadline := time.Now().Add(30 * time.Second); serving(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("agentbus still serves on %s after make run ended on SIGTERM:\n%s", addr, out.String())
		}
	}
	if syscall.Kill(-cmd.Process.Pid, 0) == nil {
		t.Errorf("a process of make run's group is left after SIGTERM:\n%s", out.String())
	}
}
