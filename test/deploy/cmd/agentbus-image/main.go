// Command agentbus-image builds agentbus's container image without a
// Docker daemon and writes it as a tarball for `docker load` (make image).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbus/agentbus/test/deploy/image"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	root := flag.String("root", "../..", "the agentbus repository")
	out := flag.String("o", "../../bin/agentbus-image.tar", "the tarball to write")
	tag := flag.String("tag", "agentbus:dev", "the image's name and tag in the tarball")
	arch := flag.String("arch", "amd64", "GOARCH of the image")
	version := flag.String("version", "dev", "version stamped into the binary")
	flag.Parse()
	if err := run(*root, *out, *tag, *arch, *version); err != nil {
		fmt.Fprintln(os.Stderr, "agentbus-image:", err)
		os.Exit(1)
	}
}

func run(root, out, tag, arch, version string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return err
	}
	img, err := image.Build(image.Options{Root: root, Arch: arch, Version: version})
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return err
	}
	if abs, err := filepath.Abs(out); err == nil {
		out = abs
	}
	fmt.Printf("wrote %s (%s): docker load -i %s\n", out, ref, out)
	return nil
}
