package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
)

// followed is what sse-follow.mjs saw.
type followed struct {
	Error    string          `json:"error"`
	Requests []string        `json:"requests"` // each connection's Last-Event-ID
	Events   []followedEvent `json:"events"`
}

// followedEvent is one event sse-follow.mjs saw: its SSE id and its
// envelope's id.
type followedEvent struct {
	ID         string `json:"id"`
	EnvelopeID string `json:"envelopeId"`
}

// follow runs sse-follow.mjs (the eventsource package) on url.
func follow(t *testing.T, url, token string, count, cut int) followed {
	t.Helper()
	node := requireNode(t)
	if _, err := os.Stat("node_modules/eventsource/package.json"); err != nil {
		t.Fatalf("test/interop/node_modules lacks eventsource: %s", installAdvice)
	}
	cmd := exec.Command(node, "sse-follow.mjs", url, token, strconv.Itoa(count), strconv.Itoa(cut))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("sse-follow.mjs: %v\n%s", err, errb.String())
	}
	var f followed
	if err := json.Unmarshal(out.Bytes(), &f); err != nil {
		t.Fatalf("sse-follow.mjs printed %q: %v\n%s", out.String(), err, errb.String())
	}
	return f
}

// TestEventSourceFollowsAndResumes: the eventsource package follows a
// tenant's live stream with a bearer credential while events keep flowing
// to two tenants; its connection is cut, it reconnects on its own with
// Last-Event-ID, and what it got is exactly the tenant's log from the
// start: no gap, no repeat, nothing of the other tenant. A wrong credential
// is refused.
func TestEventSourceFollowsAndResumes(t *testing.T) {
	s := startAgentbus(t, func(c *settings.Config) {
		c.Auth.Type = "bearer"
		c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"a", "b"}
	})
	key := testkit.Key(t, s, []string{"a"}, auth.ScopeRead)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); publishTicks(ctx, t, s) }()
	const count, cut = 120, 25
	f := follow(t, s.URL+"/a/events?after=0", key, count, cut)
	stop()
	wg.Wait()
	if f.Error != "" {
		t.Fatalf("eventsource: %s", f.Error)
	}
	if len(f.Requests) < 2 || f.Requests[0] != "" {
		t.Fatalf("connections (their Last-Event-ID): %q; want a first without and a reconnect with", f.Requests)
	}
	var got []string
	var last uint64
	for _, e := range f.Events {
		n, err := s.Ops.Reader().CursorSeq("a", false, e.ID)
		if err != nil || n <= last {
			t.Fatalf("event id %q after %d: not a growing cursor", e.ID, last)
		}
		last = n
		got = append(got, e.EnvelopeID)
	}
	if !slices.ContainsFunc(f.Events, func(e followedEvent) bool { return e.ID == f.Requests[1] }) {
		t.Fatalf("the reconnect's Last-Event-ID %q is not an event the first connection gave", f.Requests[1])
	}
	want := tenantLog(t, s, "a", key, len(got))
	if !slices.Equal(got, want) {
		t.Fatalf("eventsource got %d events that are not the tenant's log:\n got %v\nwant %v", len(got), got, want)
	}
	for _, id := range got {
		if strings.HasPrefix(id, "b-") {
			t.Fatalf("tenant a's stream carried b's event %s", id)
		}
	}
	if f := follow(t, s.URL+"/a/events", "wrong", 1, 1); !strings.HasPrefix(f.Error, "status 401") {
		t.Fatalf("a wrong credential: %+v", f)
	}
}

// publishTicks publishes events to tenants a and b, one every
// millisecond or so, until ctx ends, as a service would straight to NATS.
func publishTicks(ctx context.Context, t *testing.T, s *server.Server) {
	for i := 0; ctx.Err() == nil; i++ {
		for _, tenant := range []string{"a", "b"} {
			id := fmt.Sprintf("%s-%d", tenant, i)
			m := nats.NewMsg("agentbus.evt." + tenant + "._._.Tick")
			m.Data, _ = json.Marshal(map[string]any{"specversion": "1.0", "id": id, "source": "interop", "type": "Tick",
				"datacontenttype": "application/json", "time": time.Now().UTC().Format(time.RFC3339Nano), "data": map[string]any{"n": i}})
			m.Header.Set("Nats-Msg-Id", id)
			if _, err := s.Conn.JS.PublishMsg(ctx, m); err != nil && ctx.Err() == nil {
				t.Errorf("publish %s: %v", id, err)
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// tenantLog returns the ids of the first n events of tenant's log, read
// with GET /events.
func tenantLog(t *testing.T, s *server.Server, tenant, key string, n int) []string {
	t.Helper()
	var out []string
	after := "0"
	for len(out) < n {
		st, _, body, err := testkit.Send(http.DefaultClient, "GET", s.URL+"/"+tenant+"/events?limit=1000&after="+after, "", nil,
			"Authorization", "Bearer "+key)
		if st != 200 {
			t.Fatalf("GET events: %d %v %s", st, err, body)
		}
		var page struct {
			Events []struct {
				ID string `json:"id"`
			} `json:"events"`
			Next string `json:"next"`
		}
		if err := json.Unmarshal(body, &page); err != nil || len(page.Events) == 0 {
			t.Fatalf("page after %s: %v %s", after, err, body)
		}
		for _, e := range page.Events {
			out = append(out, e.ID)
		}
		after = page.Next
	}
	return out[:n]
}
