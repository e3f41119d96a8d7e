package abuse_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/query"
	"github.com/agentbus/agentbus/pkg/settings"
)

// TestTypePagesAreTheLogsOwn walks a seeded log page by page with several
// type filters (types that make up much of the log, a fifth of it, rare
// ones, a long run of one type, types with no events) and page sizes, and
// checks that the pages hold exactly the log's events of those types, in
// stream order, every page full but the last: reading the types from all
// the tenant's events, or each a chunk at a time, changes nothing a page
// holds; and so does reading them with the type index or without.
func TestTypePagesAreTheLogsOwn(t *testing.T) {
	for _, indexed := range []bool{true, false} {
		t.Run(fmt.Sprintf("typeIndex=%v", indexed), func(t *testing.T) { typePagesAreTheLogsOwn(t, indexed) })
	}
}

func typePagesAreTheLogsOwn(t *testing.T, indexed bool) {
	s, _ := readsStart(t, func(c *settings.Config) { c.Reads.TypeIndex = indexed })
	const n = 2000
	typeOf := func(i int) string {
		switch {
		case i >= 800 && i < 1200: // a long run of one type
			return "Run"
		case i%250 == 3:
			return "Rare" + strconv.Itoa(i/250%3)
		default:
			return "Dense" + strconv.Itoa(i%10)
		}
	}
	readsSeed(t, s, n, typeOf)
	var after sync.Map // the cursor each walk ended at, by name
	walk := func(t *testing.T, name string, types []string, limit, from, to int) {
		var want []string
		for i := from; i < to; i++ {
			if slices.Contains(types, typeOf(i)) {
				want = append(want, "seed-"+strconv.Itoa(i))
			}
		}
		var got []string
		cursor := ""
		if c, ok := after.Load(name); ok {
			cursor = c.(string)
		}
		for pages := 0; ; pages++ {
			if pages > n+1 {
				t.Fatal("the walk does not end")
			}
			p, err := s.Ops.Reader().ListEvents(context.Background(), envelope.DefaultTenant, query.EventQuery{Types: types, After: cursor, Limit: limit})
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
			cursor = p.Next
			if len(p.Events) == 0 {
				break
			}
			if len(p.Events) != limit && len(got) < len(want) {
				t.Fatalf("page %d holds %d events of %d, and more follow", pages, len(p.Events), limit)
			}
		}
		after.Store(name, cursor)
		if !slices.Equal(got, want) {
			t.Errorf("walked %d events, want %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
		}
	}
	sets := [][]string{
		{"Dense0", "Dense1"},
		{"Dense0", "Dense1", "Dense2", "Dense3", "Dense4"},
		{"Dense0", "Run"},
		{"Rare0", "Rare1", "Rare2"},
		{"Run", "Rare2", "Dense3", "Dense2", "Dense1", "Dense0", "Rare0", "Rare1"},
		{"Rare1", "NeverHappened"},
		{"Dense2", "Dense2", "Run"},
	}
	limits := []int{5, 100, 1000}
	for _, types := range sets {
		for _, limit := range limits {
			name := fmt.Sprintf("%v/%d", types, limit)
			t.Run(name, func(t *testing.T) { walk(t, name, types, limit, 0, n) })
		}
	}
	// More events come; each walk goes on from where it ended, as a poller
	// does, and finds exactly the new ones.
	readsSeedFrom(t, s, n, 600, typeOf)
	for _, types := range sets {
		for _, limit := range limits {
			name := fmt.Sprintf("%v/%d", types, limit)
			t.Run(name+"/then", func(t *testing.T) { walk(t, name, types, limit, n, n+600) })
		}
	}
}

// firstDiff is the first index where a and b differ.
func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
