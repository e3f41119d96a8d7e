package deploy

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/deploy/image"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage builds the image as make image does, reads the tarball back
// with go-containerregistry, unpacks its filesystem and runs its binary as
// a container would: as the image's user (as root: also chrooted into the
// image's filesystem), with its entrypoint, command, working directory and
// environment. `version` prints the version stamped in; `serve` (the
// image's command) becomes ready and writes the embedded server's store
// and its read models (/data/index) into the image's /data as that user,
// and stops cleanly on SIGTERM.
func TestImage(t *testing.T) {
	const version = "v0.0.0-imagetest"
	img, err := image.Build(image.Options{Root: repoRoot, Arch: runtime.GOARCH, Version: version})
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "agentbus-image.tar")
	ref, err := name.NewTag("agentbus:test")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(tarPath, ref, img); err != nil {
		t.Fatal(err)
	}
	loaded, err := tarball.ImageFromPath(tarPath, &ref)
	if err != nil {
		t.Fatalf("the tarball does not load: %v", err)
	}
	cf, err := loaded.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !slices.Equal(c.Entrypoint, []string{"agentbus"}) || !slices.Equal(c.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %q cmd %q, want [agentbus] [serve]", c.Entrypoint, c.Cmd)
	}
	if _, ok := c.Volumes["/data"]; !ok {
		t.Errorf("volumes %v: no /data", c.Volumes)
	}
	for _, p := range []string{"8080/tcp", "8081/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("exposed ports %v: no %s", c.ExposedPorts, p)
		}
	}
	uid, gid := imageUser(t, c.User)
	if uid == 0 {
		t.Fatalf("the image runs as root (user %q)", c.User)
	}

	root := unpack(t, loaded)
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(passwd), fmt.Sprintf(":x:%d:%d:", uid, gid)) {
		t.Errorf("/etc/passwd names no user %d:%d:\n%s", uid, gid, passwd)
	}
	entry := lookPath(t, root, c.Entrypoint[0], c.Env)
	static(t, filepath.Join(root, entry))
	if st, err := os.Stat(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")); err != nil || st.Size() < 100_000 {
		t.Errorf("no root certificates for HTTPS webhooks: %v", err)
	}

	// version
	out, err := imageCommand(t, root, uid, gid, c, entry, []string{"version"}, nil).CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Fatalf("agentbus version: %v\n%s\nwant it to name %s", err, out, version)
	}

	// serve, the image's command. The test listens on loopback ports of
	// its own (the image's 0.0.0.0 would refuse to start without
	// authentication) and keeps the embedded server in-process.
	api, opsAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	override := []string{"AGENTBUS_LISTEN=" + api, "AGENTBUS_OPS_LISTEN=" + opsAddr, "AGENTBUS_NATS_LISTEN="}
	var logs bytes.Buffer
	cmd := imageCommand(t, root, uid, gid, c, entry, c.Cmd, override)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("--- agentbus serve ---\n%s", logs.String())
		}
	})
	probe := "http://" + opsAddr + "/readyz"
	if !hasOpsListener(t) {
		// This binary has no operations listener yet: the discovery
		// manifest on the API port stands in for /readyz.
		t.Log("agentbus serve has no --ops-listen: probing GET /.well-known/agentproto instead of the ops port's /readyz")
		probe = "http://" + api + "/.well-known/agentproto"
	}
	testkit.EventuallyWithin(t, probe+" answering 200", 60*time.Second, func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("agentbus serve exited: %v", err)
		default:
		}
		resp, err := http.Get(probe)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if ents, err := os.ReadDir(filepath.Join(root, "data")); err != nil || len(ents) == 0 {
		t.Errorf("serve wrote nothing into the image's /data as %d:%d: %v", uid, gid, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "data", "index")); err != nil || !fi.IsDir() {
		t.Errorf("serve keeps no read models in the image's /data/index: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("agentbus serve after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("agentbus serve did not stop within 30s of SIGTERM")
	}
}

// imageUser parses the image's User, uid:gid in numbers (a name would
// need the image's /etc/passwd at run time, which Kubernetes'
// runAsNonRoot cannot check).
func imageUser(t *testing.T, user string) (int, int) {
	t.Helper()
	u, g, ok := strings.Cut(user, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("image user %q: want uid:gid in numbers", user)
	}
	return uid, gid
}

// unpack writes the image's flattened filesystem into a new directory
// (readable by everyone, so the image's user can reach it) with each
// entry's mode and, as root, its owner.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	root, err := os.MkdirTemp("", "agentbus-image-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		clean := path.Clean("/" + h.Name)
		dst := filepath.Join(root, filepath.FromSlash(clean))
		mode := os.FileMode(h.Mode) & os.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		default:
			t.Fatalf("%s: unexpected entry type %c in the image", h.Name, h.Typeflag)
		}
		if err := os.Chmod(dst, mode); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(dst, h.Uid, h.Gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// lookPath resolves the entrypoint as the container runtime does: on the
// image's PATH, inside its filesystem at root.
func lookPath(t *testing.T, root, prog string, env []string) string {
	t.Helper()
	if strings.Contains(prog, "/") {
		return prog
	}
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, dir := range filepath.SplitList(p) {
				cand := path.Join(dir, prog)
				if st, err := os.Stat(filepath.Join(root, cand)); err == nil && st.Mode()&0o111 != 0 {
					return cand
				}
			}
		}
	}
	t.Fatalf("%s is not on the image's PATH (env %q)", prog, env)
	return ""
}

// static fails t unless the binary at p is a static executable: no
// program interpreter, so it runs on an empty base image.
func static(t *testing.T, p string) {
	t.Helper()
	f, err := elf.Open(p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked (has a program interpreter)", p)
		}
	}
}

// imageCommand runs entry with args as the image's container would: the
// image's environment (then extra), its working directory, as uid:gid.
// As root the process is chrooted into the image's filesystem; otherwise
// it runs from root with the image's paths in its environment mapped
// under root (the image's user is then the test's own).
func imageCommand(t *testing.T, root string, uid, gid int, c v1.Config, entry string, args, extra []string) *exec.Cmd {
	t.Helper()
	env := append(slices.Clone(c.Env), extra...)
	cmd := exec.Command(entry, args...)
	cmd.Args = append(slices.Clone(c.Entrypoint), args...)
	if os.Geteuid() == 0 {
		cmd.Path = entry
		cmd.Dir = c.WorkingDir
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	} else {
		t.Logf("not root: running the image's binary as the test's user %d, not the image's %d", os.Geteuid(), uid)
		cmd.Path = filepath.Join(root, entry)
		cmd.Dir = filepath.Join(root, c.WorkingDir)
		env = append(env, "AGENTBUS_DATA="+filepath.Join(root, "data"))
	}
	cmd.Env = env
	return cmd
}
