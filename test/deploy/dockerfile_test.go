package deploy

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/test/deploy/image"
)

// TestDockerfileMatchesImage holds deploy/Dockerfile's final stage to the
// image make image builds: the same user, working directory, environment,
// volume, ports, entrypoint and command, a static build, and the same
// user in its /etc/passwd.
func TestDockerfileMatchesImage(t *testing.T) {
	f, err := os.Open(filepath.Join(repoRoot, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for cur := ""; sc.Scan(); {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || (l == "" && cur == "") {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur += s + " "
			continue
		}
		lines = append(lines, cur+l)
		cur = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	stages := 0
	final := map[string][]string{}
	var whole strings.Builder
	for _, l := range lines {
		whole.WriteString(l + "\n")
		instr, rest, _ := strings.Cut(l, " ")
		instr = strings.ToUpper(instr)
		if instr == "FROM" {
			stages++
			final = map[string][]string{}
		}
		final[instr] = append(final[instr], strings.TrimSpace(rest))
	}
	if stages < 2 {
		t.Errorf("%d stages, want a build stage and the final one", stages)
	}
	if got := final["FROM"]; !slices.Equal(got, []string{"scratch"}) {
		t.Errorf("final stage FROM %q, want scratch", got)
	}
	for _, want := range []string{"CGO_ENABLED=0", "GOOS=linux", "/out/usr/local/bin/agentbus", "-X github.com/agentbus/agentbus/pkg/server.Version="} {
		if !strings.Contains(whole.String(), want) {
			t.Errorf("the build stage does not say %q", want)
		}
	}
	passwd := fmt.Sprintf("%s:x:%d:%d:%s:%s:", image.User, image.UID, image.GID, image.User, image.DataDir)
	if !strings.Contains(whole.String(), passwd) {
		t.Errorf("the Dockerfile's /etc/passwd has no line %q", passwd)
	}
	if !strings.Contains(whole.String(), fmt.Sprintf("--chown=%d:%d /out/data %s", image.UID, image.GID, image.DataDir)) {
		t.Errorf("%s is not given to %d:%d", image.DataDir, image.UID, image.GID)
	}
	one := func(instr, want string) {
		if got := final[instr]; len(got) != 1 || got[0] != want {
			t.Errorf("%s %q, want %q", instr, got, want)
		}
	}
	one("USER", fmt.Sprintf("%d:%d", image.UID, image.GID))
	one("WORKDIR", image.DataDir)
	one("VOLUME", image.DataDir)
	one("EXPOSE", fmt.Sprintf("%d %d", image.APIPort, image.OpsPort))
	one("ENTRYPOINT", `["agentbus"]`)
	one("CMD", `["serve"]`)
	env := map[string]string{}
	for _, e := range final["ENV"] {
		for _, kv := range strings.Fields(e) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	want := map[string]string{}
	for _, kv := range image.Env {
		k, v, _ := strings.Cut(kv, "=")
		want[k] = v
	}
	if !maps.Equal(env, want) {
		t.Errorf("ENV %v, want the image's %v", env, want)
	}
}
