package host

import (
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server/sysmem"
)

func TestGCTunerPercent(t *testing.T) {
	const mb = 1 << 20
	tu := &gcTuner{cap: 1024 * mb}
	for _, c := range []struct {
		live, stacks uint64
		want         int
	}{
		{0, 0, 25_600}, {mb / 2, 0, 25_600}, // almost nothing: Go's least goal, 4 MB × 256, is the cap
		{10 * mb, 0, 10_100},    // (1024 - 10) / 10 = 101.4: the goal at the cap
		{60 * mb, 0, 1600},      // (1024 - 60) / 60 = 16.1
		{100 * mb, 0, 900},      // 100 MB + 100 MB × 9 = 1000 MB: at the cap
		{150 * mb, 0, 500},      // (1024 - 150) / 150 = 5.8: down to whole hundreds
		{200 * mb, 0, 400},      // at the floor
		{2048 * mb, 0, 400},     // over the cap: never below the floor
		{50 * mb, 50 * mb, 900}, // the stacks count in Go's goal: (1024 - 50) / 100
	} {
		if got := tu.percentFor(c.live, c.stacks, 0); got != c.want {
			t.Errorf("live %d MB, stacks %d MB: GOGC %d, want %d", c.live/mb, c.stacks/mb, got, c.want)
		}
	}
	if got := tu.percentFor(50*mb, 0, 50*mb); got != 900 {
		t.Errorf("globals: GOGC %d, want 900", got)
	}
}

func TestMemoryAvailable(t *testing.T) {
	const gib = 1 << 30
	const machine = 24 * gib
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(name string) ([]byte, error) {
			if s, ok := m[name]; ok {
				return []byte(s), nil
			}
			return nil, os.ErrNotExist
		}
	}
	for _, c := range []struct {
		name  string
		files map[string]string
		want  uint64
	}{
		{"no cgroup limit (v2)", map[string]string{"/sys/fs/cgroup/memory.max": "max\n"}, 24 * gib},
		{"cgroup v2 limit", map[string]string{"/sys/fs/cgroup/memory.max": "536870912\n"}, gib / 2},
		{"cgroup v2, a parent's limit", map[string]string{
			"/proc/self/cgroup":                           "0::/kubepods/pod1/ctr\n",
			"/sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n",
			"/sys/fs/cgroup/kubepods/pod1/memory.max":     "1073741824\n",
			"/sys/fs/cgroup/kubepods/memory.max":          "4294967296\n",
		}, gib},
		{"cgroup v2 path that climbs", map[string]string{"/proc/self/cgroup": "0::/../../etc\n", "/sys/fs/cgroup/etc/memory.max": "1024"}, 24 * gib},
		{"cgroup v1 unlimited", map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 24 * gib},
		{"cgroup v1 limit", map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "2147483648"}, 2 * gib},
		{"cgroup v1, a parent's limit", map[string]string{
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			"/sys/fs/cgroup/memory/memory.stat":           "cache 1\nhierarchical_memory_limit 3221225472\nrss 2\n",
		}, 3 * gib},
		{"limit above the machine", map[string]string{"/sys/fs/cgroup/memory.max": "107374182400"}, 24 * gib},
		{"nothing readable", map[string]string{}, 24 * gib},
		{"garbled", map[string]string{"/sys/fs/cgroup/memory.max": "lots", "/sys/fs/cgroup/memory/memory.stat": "hierarchical_memory_limit lots"}, 24 * gib},
	} {
		if got := memoryAvailable(files(c.files), machine); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	if n := memoryAvailable(files(nil), 0); n != 8*gib {
		t.Errorf("nothing known: %d, want 8 GiB", n)
	}
	if n := memoryAvailable(os.ReadFile, uint64(sysmem.Memory())); n == 0 {
		t.Error("this machine: 0 bytes of memory")
	}
}

// TestGCTunerFollowsCollections: the tuner sets GOGC at once, and again
// after each collection from the heap that collection kept.
func TestGCTunerFollowsCollections(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC()
	const heapCap = 48 << 20
	tu := startGCTuner(heapCap)
	defer tu.stopped.Store(true)
	if got := gogc(); got <= gcPercentMin {
		t.Fatalf("GOGC with a small heap: %d, want more than %d", got, gcPercentMin)
	}
	if goal := heapGoal(); goal > heapCap {
		t.Fatalf("heap goal with a small heap: %d MB, over the cap of %d MB", goal>>20, heapCap>>20)
	}
	ballast := make([]byte, 64<<20) // live, over the cap
	waitGOGC(t, func(p int) bool { return p == gcPercentMin }, "the floor with the heap over the cap")
	runtime.KeepAlive(ballast)
	waitGOGC(t, func(p int) bool { return p > gcPercentMin }, "above the floor once the heap is small again")
}

// waitGOGC collects until GOGC is what ok wants (the tuner runs after a
// collection, on the cleanup goroutine).
func waitGOGC(t *testing.T, ok func(int) bool, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(gogc()); {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d, want %s", gogc(), want)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// heapGoal is the runtime's heap goal now.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		panic(errors.New("no /gc/gogc:percent"))
	}
	return int(s[0].Value.Uint64())
}
