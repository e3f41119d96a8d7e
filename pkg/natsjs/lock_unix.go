//go:build unix

package natsjs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockDir takes the data dir for this process: two embedded servers on
// one store would each overwrite what the other writes. The lock is an
// advisory flock on <dir>/agentbus.lock, which the kernel releases when
// the process ends, however it ends; the file holds the holder's pid for
// the message. It returns the function that releases it.
func lockDir(dir string) (func(), error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: data dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid := make([]byte, 32)
		n, _ := f.ReadAt(pid, 0)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if p := strings.TrimSpace(string(pid[:n])); p != "" {
				holder = "process " + p
			}
			return nil, fmt.Errorf("embedded nats: data dir %s is in use by %s (another agentbus serve or keys?); "+
				"stop it, or reach its NATS with --nats-url", dir, holder)
		}
		if errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) {
			// A file system without locks (some network mounts): go on
			// unprotected rather than not at all.
			return func() {}, nil
		}
		return nil, fmt.Errorf("embedded nats: data dir %s: lock: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		_ = f.Truncate(0)
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
