package host

import (
	"testing"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestPlanMemory: the budget mode limits the runtime to the budget, the
// large-heap mode aims the heap at it; both stay within what a container
// allows.
func TestPlanMemory(t *testing.T) {
	const mib, gib = 1 << 20, 1 << 30
	for _, c := range []struct {
		name        string
		m           settings.Memory
		avail       uint64
		limit, goal uint64
	}{
		{"default on a big machine", settings.DefaultMemory, 24 * gib, gib, 0},
		{"budget set", settings.Memory{Mode: settings.MemoryBudget, Budget: gib}, 24 * gib, gib, 0},
		{"default in a 256 MiB container", settings.DefaultMemory, 256 * mib, 192 * mib, 0},
		{"large heap on a big machine", settings.Memory{Mode: settings.MemoryLargeHeap}, 24 * gib, 18 * gib, 2 * gib},
		{"large heap, budget set", settings.Memory{Mode: settings.MemoryLargeHeap, Budget: 512 * mib}, 24 * gib, 18 * gib, 512 * mib},
		{"large heap in a 2 GiB container", settings.Memory{Mode: settings.MemoryLargeHeap}, 2 * gib, 1536 * mib, 512 * mib},
	} {
		if limit, goal := planMemory(c.m, c.avail); limit != c.limit || goal != c.goal {
			t.Errorf("%s: limit %d MiB, goal %d MiB; want %d, %d", c.name, limit/mib, goal/mib, c.limit/mib, c.goal/mib)
		}
	}
}
