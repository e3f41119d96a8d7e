package abuse_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/ops"
)

// TestTypePagesAreTheLogsOwn walks a seeded log page by page with several
// type filters (dense types, rare ones, long runs of one type, types with
// no events) and page sizes, and checks that the pages hold exactly the
// log's events of those types, in stream order, every page full but the
// last: reading the types a chunk at a time changes nothing a page holds.
func TestTypePagesAreTheLogsOwn(t *testing.T) {
	s, _ := readsStart(t)
	const n = 2000
	typeOf := func(i int) string {
		switch {
		case i >= 800 && i < 1200: // a long run of one type
			return "Run"
		case i%250 == 3:
			return "Rare" + strconv.Itoa(i/250%3)
		default:
			return "Dense" + strconv.Itoa(i%4)
		}
	}
	readsSeed(t, s, n, typeOf)
	for _, types := range [][]string{
		{"Dense0", "Dense1"},
		{"Dense0", "Run"},
		{"Rare0", "Rare1", "Rare2"},
		{"Run", "Rare2", "Dense3", "Dense2", "Dense1", "Dense0", "Rare0", "Rare1"},
		{"Rare1", "NeverHappened"},
		{"Dense2", "Dense2", "Run"},
	} {
		var want []string
		for i := range n {
			if slices.Contains(types, typeOf(i)) {
				want = append(want, "seed-"+strconv.Itoa(i))
			}
		}
		for _, limit := range []int{5, 100, 1000} {
			t.Run(fmt.Sprintf("%v/%d", types, limit), func(t *testing.T) {
				var got []string
				after := ""
				for pages := 0; ; pages++ {
					if pages > n+1 {
						t.Fatal("the walk does not end")
					}
					p, err := s.Ops.ListEvents(context.Background(), envelope.DefaultTenant, ops.EventQuery{Types: types, After: after, Limit: limit})
					if err != nil {
						t.Fatal(err)
					}
					for _, raw := range p.Events {
						var e struct{ ID string }
						if err := json.Unmarshal(raw, &e); err != nil {
							t.Fatal(err)
						}
						got = append(got, e.ID)
					}
					if len(p.Events) == 0 {
						break
					}
					if len(p.Events) != limit && len(got) < len(want) {
						t.Fatalf("page %d holds %d events of %d, and more follow", pages, len(p.Events), limit)
					}
					after = p.Next
				}
				if !slices.Equal(got, want) {
					t.Errorf("walked %d events, want %d", len(got), len(want))
				}
			})
		}
	}
}
