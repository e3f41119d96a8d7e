package readme_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/test/testkit"
)

// repoRoot is the repository, from this package's directory.
const repoRoot = "../.."

// quickSection is the README's quick start.
const quickSection = "## Quick start"

// TestMain removes the binaries the tests build.
func TestMain(m *testing.M) { testkit.Main(m) }

// readme returns the README's text.
func readme(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// sectionText returns the text of the section under heading, up to the next
// heading of the same or a higher level, or fails t when there is none.
func sectionText(t *testing.T, readme, heading string) string {
	t.Helper()
	level := strings.Index(heading, " ")
	var out []string
	in, fenced := false, false
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") {
			l := strings.Index(line, " ")
			if in && l > 0 && l <= level && strings.Trim(line[:l], "#") == "" {
				break
			}
			if strings.TrimSpace(line) == heading {
				in = true
			}
		}
		if in {
			out = append(out, line)
		}
	}
	if !in {
		t.Fatalf("README.md has no %q section", heading)
	}
	return strings.Join(out, "\n")
}

// TestMakeRunArgs: the quick start shows how to hand settings to `make
// run` (make run ARGS="..."); make puts them after `agentbus serve`, which
// takes them; and `make run` alone still runs serve with no flag.
func TestMakeRunArgs(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is not installed: the quick start's make run needs it")
	}
	quick := sectionText(t, readme(t), quickSection)
	examples := regexp.MustCompile(`make run ARGS="([^"]*)"`).FindAllStringSubmatch(quick, -1)
	if len(examples) == 0 {
		t.Fatalf(`README.md %q shows no make run ARGS="..." example`, quickSection)
	}
	bin := testkit.BuildAgentbus(t)
	for _, ex := range append([][]string{{"make run", ""}}, examples...) {
		args := ex[1]
		cmd := exec.Command("make", "-n", "-s", "run", "ARGS="+args)
		if args == "" {
			cmd = exec.Command("make", "-n", "-s", "run")
		}
		cmd.Dir = repoRoot
		cmd.Env = makeEnv()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", ex[0], err, out)
		}
		line := strings.TrimSpace(string(out))
		want := strings.TrimSpace("bin/agentbus serve " + args)
		if !strings.HasSuffix(line, want) {
			t.Errorf("%s runs\n  %s\nwant it to end with %q", ex[0], line, want)
		}
		// serve takes the flags: with -h after them it parses them and
		// prints its usage; an unknown flag is an error.
		help := exec.Command(bin, append(append([]string{"serve"}, strings.Fields(args)...), "-h")...)
		help.Env = testkit.ProcessEnv()
		help.Dir = t.TempDir()
		if out, err := help.CombinedOutput(); err != nil {
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				t.Errorf("%s: agentbus serve does not take %q: %s", ex[0], args, out)
			} else {
				t.Fatal(err)
			}
		}
	}
}

// makeEnv is the environment of the make runs: the test's, without what
// would change what make prints (ARGS, GO, make's own flags).
func makeEnv() []string {
	var env []string
	for _, kv := range testkit.ProcessEnv() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "ARGS", "GO", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VERSION", "LDFLAGS":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// TestQuickStartPrerequisites: the quick start names the Go version go.mod
// asks for, and what `make test` needs besides Go: the tools the test
// suites look for (every exec.LookPath of a test), npm, and network access
// for npm and apt-get.
func TestQuickStartPrerequisites(t *testing.T) {
	quick := sectionText(t, readme(t), quickSection)
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	if want := "Go " + string(m[1]); !strings.Contains(quick, want) {
		t.Errorf("README.md %q does not say which Go it needs (%q, go.mod's go line)", quickSection, want)
	}
	tools := map[string]bool{"npm": true, "apt-get": true}
	err = filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "data") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, l := range regexp.MustCompile(`exec\.LookPath\("([^"]+)"\)`).FindAllSubmatch(src, -1) {
			tools[string(l[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for tool := range tools {
		if !regexp.MustCompile("(^|[^A-Za-z0-9-])`?" + regexp.QuoteMeta(tool) + "`?([^A-Za-z0-9-]|$)").MatchString(quick) {
			t.Errorf("README.md %q does not say that make test uses %s", quickSection, tool)
		}
	}
	for _, what := range []string{"network", "npm registry", "root"} {
		if !strings.Contains(quick, what) {
			t.Errorf("README.md %q does not mention %q", quickSection, what)
		}
	}
}
