//go:build !linux

package main

import "time"

// sleepExactly is time.Sleep here; on Linux it is a nanosleep system call.
func sleepExactly(d time.Duration) { time.Sleep(d) }
