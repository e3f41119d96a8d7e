package main

import (
	"bytes"
	"context"
	"regexp"
	"runtime/debug"
	"testing"
)

// TestBuildFrom: the version and commit -ldflags set win; otherwise the
// module version of a go install and the vcs.revision and vcs.modified
// the toolchain stamped are used; with neither, "dev" and "unknown".
func TestBuildFrom(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	devel := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	for _, c := range []struct {
		name            string
		version, commit string
		info            *debug.BuildInfo
		want            buildInfo
	}{
		{"ldflags", "1.2.3", "fff", stamped, buildInfo{Version: "1.2.3", Commit: "fff", Go: "go1.26.8"}},
		{"stamped", "dev", "", stamped, buildInfo{Version: "v0.1.0", Commit: "abc123", Modified: true, Go: "go1.26.8"}},
		{"nothing", "dev", "", devel, buildInfo{Version: "dev", Commit: "unknown", Go: "go1.26.8"}},
	} {
		if got := buildFrom(c.version, c.commit, c.info, true); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if got := buildFrom("dev", "", nil, false); got.Commit != "unknown" || got.Version != "dev" || got.Go == "" {
		t.Errorf("no build information: %+v", got)
	}
}

// TestVersionCommand: agentbus version prints the version, the commit and
// the Go version, one per line.
func TestVersionCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^agentbus \S+\ncommit   \S+( \(modified\))?\ngo       go\S+ \S+/\S+\n$`)
	if !re.MatchString(out.String()) {
		t.Errorf("agentbus version printed %q", out.String())
	}
	var mod bytes.Buffer
	printVersion(&mod, buildInfo{Version: "v1", Commit: "abc", Modified: true, Go: "go1.26.8"})
	if !bytes.Contains(mod.Bytes(), []byte("commit   abc (modified)\n")) {
		t.Errorf("a modified build: %q", mod.String())
	}
}
