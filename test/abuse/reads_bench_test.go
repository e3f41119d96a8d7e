package abuse_test

import (
	"context"
	"testing"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/query"
	"github.com/agentbus/agentbus/pkg/settings"
)

// BenchmarkEventPages is what one page of GET /events costs on a seeded
// log of readsEvents events (readsType), read straight from the
// operations (no HTTP): the events it returns (events/op) and the
// process's CPU time per page (cpu-ms/op, the embedded server included).
// Each page is read with the type index ("index/…", the default) and, for
// reference in the same run, from the log by subject filter
// (reads.typeIndex false, "filter/…"). READS_N sets the log's length.
func BenchmarkEventPages(b *testing.B) {
	twenty := readsTwentyTypes()
	cases := []struct {
		name  string
		types []string
		limit int
	}{
		{"twenty-types-1000", twenty, 1000},
		{"twenty-types-100", twenty, 100},
		{"all-1000", nil, 1000},
		{"one-dense-type-1000", []string{"Dense0"}, 1000},
		{"one-sparse-type-1000", []string{"Sparse3"}, 1000},
		{"two-sparse-types-1000", []string{"Sparse3", "Sparse4"}, 1000},
	}
	for _, way := range []struct {
		name    string
		indexed bool
	}{{"index", true}, {"filter", false}} {
		s, _ := readsStart(b, func(c *settings.Config) { c.Reads.TypeIndex = way.indexed })
		readsSeed(b, s, readsEvents, readsType)
		for _, bc := range cases {
			b.Run(way.name+"/"+bc.name, func(b *testing.B) {
				ctx := context.Background()
				events := 0
				cpu0 := processCPU(b)
				b.ResetTimer()
				for b.Loop() {
					p, err := s.Ops.Reader().ListEvents(ctx, envelope.DefaultTenant, query.EventQuery{Types: bc.types, Limit: bc.limit})
					if err != nil {
						b.Fatal(err)
					}
					events += len(p.Events)
				}
				b.StopTimer()
				b.ReportMetric(float64(events)/float64(b.N), "events/op")
				b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
			})
		}
		_ = s.Stop(context.Background())
	}
}
