package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestReceiptsRebuildFromTheLogs: the receipts are a projection of the
// command and event logs, kept on the replica's disk. With agentbus
// stopped, deleting its read models on disk and starting again rebuilds
// every receipt whose command's events are still stored: the correlation
// lookup and the trace answer as before, a rejected command's too.
func TestReceiptsRebuildFromTheLogs(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	data := t.TempDir()
	on := func(c *settings.Config) { c.NATS.URL, c.Data = natsURL, data }
	s := start(t, on)
	var corrs []string
	for _, id := range []string{"o-r1", "o-r2", "o-r3"} {
		corrs = append(corrs, submitCommand(t, s.URL, placeOrder(id)))
	}
	dup := submitCommand(t, s.URL, placeOrder("o-r1")) // rejected: the order exists
	before := map[string]string{}
	for _, c := range append(corrs, dup) {
		eventsOf(t, s.URL, c, 1)
		before[c] = string(get(t, s.URL+"/traces/"+c).Body)
	}
	if !strings.Contains(before[dup], `"rejected"`) {
		t.Fatalf("the trace of the second PlaceOrder of o-r1: %s; want it rejected", before[dup])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(data, server.DiskDir)
	if _, err := os.Stat(index); err != nil {
		t.Fatalf("the read models on disk: %v", err)
	}
	if err := os.RemoveAll(index); err != nil {
		t.Fatal(err)
	}
	s = start(t, on)
	for _, c := range append(corrs, dup) {
		eventsOf(t, s.URL, c, 1)
		testkit.Eventually(t, "the trace of "+c+" as before", func() bool {
			r := get(t, s.URL+"/traces/"+c)
			return r.Status == 200 && sameTrace(t, before[c], string(r.Body))
		})
	}
}

// sameTrace reports whether two trace bodies say the same but for when
// they were last updated.
func sameTrace(t *testing.T, a, b string) bool {
	t.Helper()
	norm := func(s string) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("trace %s: %v", s, err)
		}
		delete(m, "updatedAt")
		out, _ := json.Marshal(m)
		return string(out)
	}
	return norm(a) == norm(b)
}
