package readme_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
)

// terminals is the run of a README section written for terminals side by
// side ("in one terminal ..., in another ..."): every sh block but the last
// starts a program that runs until it is stopped (agentbus first, then,
// say, the example agent), and the last block runs to its end while they
// run, as the walk-through does.
//
// The commands run as written, from the repository root, with stand-ins
// for what a test cannot use as is:
//   - `go run ./cmd/<name>` runs the binary of cmd/<name> the test built
//     (a `go` script first on PATH does that, and nothing else);
//   - agentbus's default addresses are free loopback ports and its data a
//     temporary directory, set as AGENTBUS_LISTEN, AGENTBUS_NATS_LISTEN and
//     AGENTBUS_DATA in every terminal, and given to the example agent as
//     --agentbus and --nats after the README's own flags;
//   - http://127.0.0.1:8080 in the blocks is the test's agentbus;
//   - a webhook receiver's address, receiverAddr, is another free loopback
//     port, and its secret file, secretFile, a temporary file;
//   - TMPDIR is a temporary directory, so what mktemp makes is removed.
type terminals struct {
	base     string     // stands for readmeBase
	nats     string     // the embedded NATS server's address
	receiver string     // stands for receiverAddr
	secret   string     // stands for secretFile
	progs    []*program // the long-running blocks, in order
	recs     []record   // the last block's commands and what they printed
	vars     map[string]string
}

// What README blocks may name besides agentbus's address, with a stand-in
// each (see terminals): a webhook receiver's address, which webhook URLs
// may point at (no curl command may), and the file its secret is kept in.
const (
	receiverAddr = "127.0.0.1:9000"
	secretFile   = "/tmp/agentbus-webhook-secret"
)

// standIns replaces what the README names with the run's stand-ins.
func (run *terminals) standIns(s string) string {
	return strings.NewReplacer(readmeBase, run.base, receiverAddr, run.receiver, secretFile, run.secret).Replace(s)
}

// program is a long-running block: bash in a process group of its own, so
// that what it started stops with it.
type program struct {
	name string
	cmd  *exec.Cmd
	out  testkit.LockedBuffer
	done chan struct{}
}

// exited reports whether the program has ended.
func (p *program) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// runTerminals runs the sh blocks of the README section heading as
// terminals side by side (see terminals) and returns the run with the
// values of vars at the end of the last block. ready, if given, waits
// until the program of block i (1 and up: block 0, agentbus, is ready when
// it serves HTTP) is ready, failing t otherwise.
func runTerminals(t *testing.T, heading string, ready func(t *testing.T, i int, p *program, base string), vars ...string) *terminals {
	t.Helper()
	var blocks []string
	for _, b := range sections(t, readme(t))[heading] {
		if b.Lang == "sh" || b.Lang == "bash" {
			blocks = append(blocks, b.Text)
		}
	}
	if len(blocks) < 2 {
		t.Fatalf("README.md %q: want an sh block that starts agentbus and one that uses it, found %d sh blocks", heading, len(blocks))
	}
	if !strings.Contains(blocks[0], "go run ./cmd/agentbus serve") {
		t.Fatalf("README.md %q: the first block does not start agentbus (go run ./cmd/agentbus serve):\n%s", heading, blocks[0])
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	run := &terminals{base: "http://" + testkit.FreeAddr(t), nats: testkit.FreeAddr(t),
		receiver: testkit.FreeAddr(t), secret: filepath.Join(t.TempDir(), "webhook-secret")}
	shim := goShim(t, strings.Join(blocks, "\n"), run)
	env := []string{
		"PATH=" + shim + string(os.PathListSeparator) + os.Getenv("PATH"),
		"AGENTBUS_LISTEN=" + strings.TrimPrefix(run.base, "http://"),
		"AGENTBUS_NATS_LISTEN=" + run.nats,
		"AGENTBUS_DATA=" + t.TempDir(),
		"TMPDIR=" + t.TempDir(),
	}
	for i, b := range blocks {
		b = run.standIns(b)
		if bad := foreignHosts(b, run.base, run.receiver); len(bad) > 0 {
			t.Fatalf("README.md %q block %d would reach beyond the test's agentbus:\n%s", heading, i+1, strings.Join(bad, "\n"))
		}
		for _, a := range regexp.MustCompile(`(127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1\])(:\d+)?`).FindAllString(b, -1) {
			if a != strings.TrimPrefix(run.base, "http://") && a != run.receiver {
				t.Fatalf("README.md %q block %d calls %s, not %s (or a receiver on %s)", heading, i+1, a, readmeBase, receiverAddr)
			}
		}
		blocks[i] = b
	}
	for i, b := range blocks[:len(blocks)-1] {
		p := startProgram(t, fmt.Sprintf("%s, terminal %d", heading, i+1), b, root, env)
		run.progs = append(run.progs, p)
		if i == 0 {
			waitServing(t, p, run.base+"/.well-known/agentproto")
		} else if ready != nil {
			ready(t, i, p, run.base)
		}
	}
	run.recs, run.vars = runScript(t, blocks[len(blocks)-1], scriptOpts{dir: root, env: env, vars: vars})
	for _, p := range run.progs {
		if p.exited() {
			t.Fatalf("%s ended while the last block ran: %v\n%s", p.name, p.cmd.ProcessState, p.out.String())
		}
	}
	return run
}

// goShim writes the `go` that the blocks' `go run ./cmd/<name>` calls:
// it runs the binary of cmd/<name> (built now, for every name the blocks
// use) and refuses anything else. It returns the directory to put first on
// PATH.
func goShim(t *testing.T, text string, run *terminals) string {
	t.Helper()
	var cases strings.Builder
	for _, m := range regexp.MustCompile(`\bgo run \./cmd/([a-z][a-z0-9-]*)`).FindAllStringSubmatch(text, -1) {
		name := m[1]
		if strings.Contains(cases.String(), "./cmd/"+name+")") {
			continue
		}
		bin := testkit.Build(t, name)
		extra := ""
		if name == "example-agent" { // its defaults are agentbus's default addresses
			extra = fmt.Sprintf(" --agentbus %q --nats %q", run.base, "nats://"+run.nats)
		}
		fmt.Fprintf(&cases, "./cmd/%s) shift 2; exec %q \"$@\"%s ;;\n", name, bin, extra)
	}
	if other := regexp.MustCompile(`(?m)(^|[\s;|&(])go (\S+)`).FindAllStringSubmatch(text, -1); len(other) > 0 {
		for _, o := range other {
			if o[2] != "run" {
				t.Fatalf("the README's terminals call go %s: only go run ./cmd/<name> has a stand-in", o[2])
			}
		}
	}
	dir := t.TempDir()
	script := "#!/bin/sh\n# go run ./cmd/<name>: the binary the README test built.\n" +
		"[ \"$1\" = run ] || { echo \"go $*: the README test has no stand-in for it\" >&2; exit 127; }\n" +
		"case \"$2\" in\n" + cases.String() +
		"*) echo \"go $*: the README test has no stand-in for it\" >&2; exit 127 ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(dir, "go"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startProgram runs block with bash -euo pipefail in dir with the README
// scripts' environment and env, in a process group of its own. When t ends
// the group gets SIGTERM, and SIGKILL if it has not ended 15 s later; if t
// failed, the program's output is logged.
func startProgram(t *testing.T, name, block, dir string, env []string) *program {
	t.Helper()
	p := &program{name: name, done: make(chan struct{})}
	p.cmd = exec.Command("bash", "-euo", "pipefail", "-c", block)
	p.cmd.Dir = dir
	p.cmd.Env = append(scriptEnv(t.TempDir()), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		deadline := time.Now().Add(15 * time.Second)
		for !p.exited() || syscall.Kill(-pgid, 0) == nil {
			if time.Now().After(deadline) {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				<-p.done
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if t.Failed() {
			t.Logf("--- %s output ---\n%s", name, p.out.String())
		}
	})
	return p
}

// waitServing waits until url answers 200, failing t when p ends first or
// 60 s pass.
func waitServing(t *testing.T, p *program, url string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if p.exited() {
			t.Fatalf("%s ended before serving %s:\n%s", p.name, url, p.out.String())
		}
		if res, err := client.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not serve %s after 60s:\n%s", p.name, url, p.out.String())
		}
	}
}

// getAs sends GET url with a bearer credential (none when cred is "")
// until check accepts the answer or 15 s pass, and returns the last
// answer: the README's commands ran once, and what they caused may take a
// moment to show.
func getAs(t *testing.T, url, cred string, check func(status int, body string) bool) (int, string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cred != "" {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if check(res.StatusCode, string(b)) || time.Now().After(deadline) {
			return res.StatusCode, string(b)
		}
	}
}

// eventTypes returns the types of the events of a GET /events answer.
func eventTypes(t *testing.T, body string) []string {
	t.Helper()
	page := jsonOf(t, "GET /events", body)
	evs, ok := page["events"].([]any)
	if !ok {
		return nil
	}
	var types []string
	for _, e := range evs {
		m, _ := e.(map[string]any)
		typ, _ := m["type"].(string)
		types = append(types, typ)
	}
	return types
}
