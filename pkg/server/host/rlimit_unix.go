//go:build unix

package host

import "syscall"

// openFileLimit is the process's file-descriptor limit (the soft one, which
// Go raises to the hard one at start), 0 when unknown.
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur >= 1<<62 { // unlimited
		return 0
	}
	return uint64(r.Cur)
}
