package settings_test

import (
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestValidateReads: the bounds on reads are checked against each other
// and their ranges, every problem named by its key.
func TestValidateReads(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(*settings.Reads)
		bad    []string // every problem expected; none = valid
	}{
		{"defaults", func(*settings.Reads) {}, nil},
		{"one at a time", func(r *settings.Reads) {
			*r = settings.Reads{Concurrent: 1, PerCredential: 1, Large: 1, LargePerCredential: 1, LargeShare: settings.Duration(time.Second), Connections: 1}
		}, nil},
		{"no reads", func(r *settings.Reads) { r.Concurrent = 0 }, []string{"reads.concurrent 0", "reads.perCredential 4", "reads.large 2"}},
		{"per credential over all", func(r *settings.Reads) { r.PerCredential = 17 }, []string{"reads.perCredential 17: must be 1 to reads.concurrent (16)"}},
		{"large over all", func(r *settings.Reads) { r.Large = 17 }, []string{"reads.large 17"}},
		{"large per credential over large", func(r *settings.Reads) { r.LargePerCredential = 3 }, []string{"reads.largePerCredential 3"}},
		{"large per credential over per credential", func(r *settings.Reads) { r.PerCredential, r.LargePerCredential = 1, 2 }, []string{"reads.largePerCredential 2"}},
		{"no large reads", func(r *settings.Reads) { r.LargePerCredential = 0 }, []string{"reads.largePerCredential 0"}},
		{"no share", func(r *settings.Reads) { r.LargeShare = 0 }, []string{"reads.largeShare 0s: must be 10ms to 1s"}},
		{"more than all the time", func(r *settings.Reads) { r.LargeShare = settings.Duration(2 * time.Second) }, []string{"reads.largeShare 2s"}},
		{"no connections", func(r *settings.Reads) { r.Connections = 0 }, []string{"reads.connections 0: must be 1 to 64"}},
		{"too many connections", func(r *settings.Reads) { r.Connections = 65 }, []string{"reads.connections 65"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := settings.Default()
			c.mutate(&cfg.Reads)
			wantProblems(t, cfg.Validate(), c.bad)
		})
	}
}
