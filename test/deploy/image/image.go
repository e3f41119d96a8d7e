// Package image builds agentbus's container image without a Docker daemon:
// the same files, user and settings as deploy/Dockerfile, assembled with
// go-containerregistry and written as a tarball `docker load` takes.
package image

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The image's user, group and paths (deploy/Dockerfile's).
const (
	UID        = 65532
	GID        = 65532
	User       = "agentbus"
	BinaryPath = "/usr/local/bin/agentbus"
	DataDir    = "/data"
	CAFile     = "/etc/ssl/certs/ca-certificates.crt"
	APIPort    = 8080
	OpsPort    = 8081
)

// Env is the image's environment: agentbus listens on every interface of
// the container (so it refuses to start until authentication is chosen,
// auth.type or --auth) and keeps its data in /data: the embedded server's
// store, and the replica's read models (/data/index).
var Env = []string{
	"PATH=/usr/local/bin",
	fmt.Sprintf("AGENTBUS_LISTEN=0.0.0.0:%d", APIPort),
	fmt.Sprintf("AGENTBUS_OPS_LISTEN=0.0.0.0:%d", OpsPort),
	"AGENTBUS_DATA=" + DataDir,
}

// Options say what to build.
type Options struct {
	// Root is the agentbus repository (holding go.mod).
	Root string
	// Arch is the GOARCH of the binary and the image (default amd64).
	Arch string
	// Version is stamped into the binary (agentbus version).
	Version string
}

// Build cross-compiles agentbus (static, CGO_ENABLED=0) for linux/o.Arch
// and returns the image holding it.
func Build(o Options) (v1.Image, error) {
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	dir, err := os.MkdirTemp("", "agentbus-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "agentbus")
	cmd := exec.Command("go", "build", "-trimpath",
		"-ldflags", "-s -w -X github.com/agentbus/agentbus/pkg/server.Version="+o.Version,
		"-o", bin, "./cmd/agentbus")
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	layer, err := Layer(binary)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.DockerManifestSchema2), layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", UID, GID),
		WorkingDir:   DataDir,
		Env:          Env,
		Entrypoint:   []string{"agentbus"},
		Cmd:          []string{"serve"},
		Volumes:      map[string]struct{}{DataDir: {}},
		ExposedPorts: map[string]struct{}{fmt.Sprintf("%d/tcp", APIPort): {}, fmt.Sprintf("%d/tcp", OpsPort): {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "agentbus",
			"org.opencontainers.image.version":  o.Version,
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.source":   "https://github.com/agentbus/agentbus",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// Layer returns the image's one layer: the binary, /etc/passwd and
// /etc/group naming the user, the root certificates, and /data owned by
// the user. Every entry has the Unix epoch as its time, so the same
// binary makes the same layer.
func Layer(binary []byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	dirs := []string{"etc", "etc/ssl", "etc/ssl/certs", "usr", "usr/local", "usr/local/bin"}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(DataDir, "/") + "/", Mode: 0o750,
		Uid: UID, Gid: GID, Uname: User, Gname: User, ModTime: epoch}); err != nil {
		return nil, err
	}
	files := map[string]struct {
		mode int64
		data []byte
	}{
		"etc/passwd":                        {0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", User, UID, GID, User, DataDir)},
		"etc/group":                         {0o644, fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", User, GID)},
		strings.TrimPrefix(CAFile, "/"):     {0o644, rootCertificates()},
		strings.TrimPrefix(BinaryPath, "/"): {0o755, binary},
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := files[n]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: f.mode, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
}

// rootCertificates is the Mozilla root store (golang.org/x/crypto's
// x509roots/fallback bundle) as PEM: what Go's TLS client reads at
// CAFile to verify HTTPS webhook receivers. Roots the bundle limits
// by a constraint are left out, as a PEM file cannot carry it.
func rootCertificates() []byte {
	var out []byte
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})...)
	}
	return out
}
