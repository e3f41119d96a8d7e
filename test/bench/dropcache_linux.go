package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropFileCache writes path's dirty pages and asks the kernel to drop the
// file from its page cache (pages a process has mapped stay).
func dropFileCache(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
