package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/agentbus/agentbus/pkg/server"
)

// buildInfo is what `agentbus version` prints.
type buildInfo struct {
	Version  string // the release, or "dev"
	Commit   string // the source revision, or "unknown"
	Modified bool   // the source differed from Commit
	Go       string // the Go toolchain that built the binary
}

// readBuild returns this binary's build information: the version and
// commit -ldflags set (server.Version, server.Commit, as make build does),
// else what the Go toolchain stamped into the binary (the module version
// of a go install, vcs.revision and vcs.modified of a build in a git
// checkout).
func readBuild() buildInfo {
	info, ok := debug.ReadBuildInfo()
	return buildFrom(server.Version, server.Commit, info, ok)
}

func buildFrom(version, commit string, info *debug.BuildInfo, ok bool) buildInfo {
	b := buildInfo{Version: version, Commit: commit, Go: runtime.Version()}
	if !ok || info == nil {
		if b.Commit == "" {
			b.Commit = "unknown"
		}
		return b
	}
	b.Go = info.GoVersion
	if (b.Version == "" || b.Version == "dev") && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = info.Main.Version
	}
	if b.Commit == "" {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// printVersion writes b as `agentbus version` prints it.
func printVersion(w io.Writer, b buildInfo) {
	commit := b.Commit
	if b.Modified {
		commit += " (modified)"
	}
	fmt.Fprintf(w, "agentbus %s\ncommit   %s\ngo       %s %s/%s\n", b.Version, commit, b.Go, runtime.GOOS, runtime.GOARCH)
}
