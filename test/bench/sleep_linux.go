package main

import (
	"syscall"
	"time"
)

// sleepExactly blocks its goroutine for d in a nanosleep system call:
// the kernel's high-resolution timers wake it within tens of microseconds,
// where the runtime's timers, when the process has nothing else to do,
// wait for an epoll timeout rounded up to the next millisecond.
func sleepExactly(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
