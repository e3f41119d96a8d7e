package natsjs

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkKVLookups is what asking the receipts bucket about missing keys
// costs the process (the embedded server included): one key per Get, as
// POST /commands did for every command, against groups of keys per Found,
// as its grouped lookups do. cpu-µs/key is the process's CPU time per key
// asked, whatever else the machine does; 16 goroutines per P ask at once.
func BenchmarkKVLookups(b *testing.B) {
	for _, group := range []int{1, 2, 8, 22, 64} {
		name := "get"
		if group > 1 {
			name = fmt.Sprintf("found-%d", group)
		}
		b.Run(name, func(b *testing.B) {
			_, k, _ := storeBucket(b)
			ctx := context.Background()
			var next atomic.Int64
			b.SetParallelism(16)
			cpu0 := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				keys := make([]string, group)
				for pb.Next() {
					n := next.Add(1)
					for i := range keys {
						keys[i] = fmt.Sprintf("default.missing-%d-%d", n, i)
					}
					if group == 1 {
						if _, _, err := k.Get(ctx, keys[0]); err == nil {
							b.Error("a missing key was found")
						}
					} else if found, err := k.Found(ctx, keys); found != "" || err != nil {
						b.Errorf("found %q, %v among missing keys", found, err)
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N*group), "cpu-µs/key")
		})
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
