//go:build linux

package catalog_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/catalog"
)

// TestFingerprintSkipsWhatIsNotAFile: a named pipe and an unreadable
// directory beside the catalogue files neither block nor fail the
// fingerprint; a changed file still changes it.
func TestFingerprintSkipsWhatIsNotAFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "closed"), 0o000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "closed"), 0o755) })
	done := make(chan string, 1)
	go func() {
		f, err := catalog.Fingerprint(os.DirFS(dir))
		if err != nil {
			t.Errorf("fingerprint: %v", err)
		}
		done <- f
	}()
	var first string
	select {
	case first = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the fingerprint blocks on a named pipe")
	}
	if err := os.WriteFile(filepath.Join(dir, "a.json"), []byte(`{"changed":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := catalog.Fingerprint(os.DirFS(dir)); err != nil || again == first {
		t.Fatalf("after a change: %q %v (before %q)", again, err, first)
	}
}
