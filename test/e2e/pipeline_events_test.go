package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
)

// TestEventsPaging walks the event log page by page with every filter and
// checks stream order with no duplicates and no gaps.
func TestEventsPaging(t *testing.T) {
	t.Parallel()
	s := start(t)
	types := make([]string, 250)
	for i := range types {
		types[i] = "SeedB"
		if i%3 == 0 {
			types[i] = "SeedA"
		}
	}
	ids := plSeed(t, s, types)
	var idsA, idsB []string
	for i, id := range ids {
		if types[i] == "SeedA" {
			idsA = append(idsA, id)
		} else {
			idsB = append(idsB, id)
		}
	}
	seeds := func(evs []map[string]any) []string {
		var out []string
		for _, id := range plIDs(evs) {
			if strings.HasPrefix(id, "seed-") {
				out = append(out, id)
			}
		}
		return out
	}
	tests := []struct {
		name  string
		query url.Values
		limit int
		want  []string
	}{
		{"everything, pages of 13", url.Values{}, 13, ids},
		{"everything, pages of 1", url.Values{}, 1, ids},
		{"everything, one page of 1000", url.Values{}, 1000, ids},
		{"one type, pages of 10", url.Values{"type": {"SeedA"}}, 10, idsA},
		{"other type, pages of 100", url.Values{"type": {"SeedB"}}, 100, idsB},
		{"two types merge in stream order, pages of 7", url.Values{"type": {"SeedA", "SeedB"}}, 7, ids},
		{"two types, reversed, pages of 64", url.Values{"type": {"SeedB", "SeedA"}}, 64, ids},
		{"a type twice", url.Values{"type": {"SeedA", "SeedA"}}, 9, idsA},
		{"a type with no events", url.Values{"type": {"NeverHappened"}}, 10, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			all := plWalk(t, s, tt.query, tt.limit)
			got := seeds(all)
			if len(got) != len(all) && len(tt.query["type"]) > 0 {
				t.Errorf("a type filter let %d other events through", len(all)-len(got))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("walked %d events, want %d in stream order (first difference at %d)", len(got), len(tt.want), plFirstDiff(got, tt.want))
			}
			for _, e := range all {
				if typ := e["type"].(string); len(tt.query["type"]) > 0 && !slices.Contains(tt.query["type"], typ) {
					t.Errorf("event of type %s in a page filtered on %v", typ, tt.query["type"])
				}
			}
		})
	}

	t.Run("default page is 100", func(t *testing.T) {
		t.Parallel()
		for _, q := range []string{"/events", "/events?type=SeedB", "/events?type=SeedA&type=SeedB"} {
			if p := plList(t, s, q); len(p.Events) != 100 {
				t.Errorf("GET %s: %d events, want the default 100", q, len(p.Events))
			}
		}
	})
	t.Run("cursor past the end", func(t *testing.T) {
		t.Parallel()
		last := plList(t, s, "/events?limit=1000")
		p := plList(t, s, "/events?after="+last.Next)
		if len(p.Events) != 0 || p.Next != last.Next {
			t.Errorf("after the last event: %d events, next %q (want none and %q)", len(p.Events), p.Next, last.Next)
		}
		beyond := s.Ops.Reader().Cursor(envelope.DefaultTenant, false, 999999999)
		p = plList(t, s, "/events?after="+beyond)
		if len(p.Events) != 0 || p.Next != beyond {
			t.Errorf("after beyond the stream: %d events, next %q", len(p.Events), p.Next)
		}
	})
	t.Run("after 0 is the start", func(t *testing.T) {
		t.Parallel()
		a, b := plList(t, s, "/events?limit=5"), plList(t, s, "/events?limit=5&after=0")
		if !slices.Equal(plIDs(a.Events), plIDs(b.Events)) || a.Next != b.Next {
			t.Errorf("after=0 differs from no cursor")
		}
	})
	t.Run("a page's cursor resumes exactly after it", func(t *testing.T) {
		t.Parallel()
		p1 := plList(t, s, "/events?type=SeedA&limit=3")
		p2 := plList(t, s, "/events?type=SeedA&limit=3&after="+p1.Next)
		got := append(plIDs(p1.Events), plIDs(p2.Events)...)
		if !slices.Equal(got, idsA[:6]) {
			t.Errorf("two pages = %v, want %v", got, idsA[:6])
		}
	})
}

// TestEventsPagingLargeEvents: pages of large events stop at about
// bus.RangeBytes whatever the limit, and their cursors walk every event
// once, in order, with one type or several.
func TestEventsPagingLargeEvents(t *testing.T) {
	t.Parallel()
	s := start(t)
	types := make([]string, 30)
	for i := range types {
		types[i] = []string{"BigA", "BigB"}[i%2]
	}
	const padding = 500_000
	ids := plSeed(t, s, types, map[string]any{"pad": strings.Repeat("x", padding)})
	var idsA []string
	for i, id := range ids {
		if types[i] == "BigA" {
			idsA = append(idsA, id)
		}
	}
	perPage := (bus.RangeBytes + padding - 1) / padding // the page's last event takes it past the bound
	for _, c := range []struct {
		types []string
		want  []string
	}{
		{nil, ids},
		{[]string{"BigA"}, idsA},
		{[]string{"BigA", "BigB"}, ids},
	} {
		q := url.Values{"type": c.types}
		var got []string
		pages := 0
		for after := ""; ; pages++ {
			q.Set("limit", "1000")
			if after != "" {
				q.Set("after", after)
			}
			r := get(t, s.URL+"/events?"+q.Encode())
			if r.Status != 200 {
				t.Fatalf("types %v: %d %.300s", c.types, r.Status, r.Body)
			}
			var p plPage
			if err := json.Unmarshal(r.Body, &p); err != nil {
				t.Fatal(err)
			}
			if len(p.Events) > perPage {
				t.Fatalf("types %v: a page of %d events (%d bytes), want at most %d", c.types, len(p.Events), len(r.Body), perPage)
			}
			if len(p.Events) == 0 {
				break
			}
			for _, id := range plIDs(p.Events) {
				if strings.HasPrefix(id, "seed-") {
					got = append(got, id)
				}
			}
			after = p.Next
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("types %v: walked %d events in %d pages, want %d in stream order (first difference at %d)", c.types, len(got), pages, len(c.want), plFirstDiff(got, c.want))
		}
		if min := (len(c.want) + perPage - 1) / perPage; pages < min {
			t.Errorf("types %v: %d pages, want at least %d", c.types, pages, min)
		}
	}
}

func plFirstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestEventsQueryErrors(t *testing.T) {
	t.Parallel()
	s := start(t)
	tests := []struct {
		query string
		paths []string
	}{
		{"limit=0", []string{"limit"}},
		{"limit=1001", []string{"limit"}},
		{"limit=abc", []string{"limit"}},
		{"limit=-5", []string{"limit"}},
		{"limit=1.5", []string{"limit"}},
		{"limit=", nil}, // empty means default: no error
		{"after=abc", []string{"after"}},
		{"after=-1", []string{"after"}},
		{"after=1e3", []string{"after"}},
		{"after=1", []string{"after"}}, // a number is not a cursor: only 0 is
		{"unknown=1", []string{"unknown"}},
		{"Type=OrderPlaced", []string{"Type"}},
		{"type=notPascal", []string{"type"}},
		{"type=Order.Placed", []string{"type"}},
		{"type=*", []string{"type"}},
		{"type=>", []string{"type"}},
		{"type=OrderPlaced&type=bad-type", []string{"type"}},
		{"correlationId=" + url.QueryEscape("a b"), []string{"correlationId"}},
		{"correlationId=a.b", []string{"correlationId"}},
		{"correlationId=*", []string{"correlationId"}},
		{"limit=0&after=x&type=y", []string{"after", "limit", "type"}},
		// A query that does not decode is refused whole, never read in part.
		{"correlationId=abc%zz", []string{"query"}},
		{"synthetic=tru%e", []string{"query"}},
		{"limit=1;x=2", []string{"query"}},
		// One value for each parameter that takes one.
		{"limit=5&limit=abc", []string{"limit"}},
		{"synthetic=false&synthetic=true", []string{"synthetic"}},
		{"limit=5&after=1&after=2&limit=6", []string{"after", "limit"}},
		{"type=OrderPlaced&type=NoteAdded", nil},
		// The catalogue view takes nothing else.
		{"view=catalog&limit=abc", []string{"limit"}},
		{"view=catalog&limit=5&after=3", []string{"after", "limit"}},
		{"view=catalog", nil},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			r := get(t, s.URL+"/events?"+tt.query)
			if tt.paths == nil {
				if r.Status != 200 {
					t.Errorf("%d %s", r.Status, r.Body)
				}
				return
			}
			b := plError(t, r, 400, "VALIDATION_FAILED")
			if got := b.paths(); !slices.Equal(got, tt.paths) {
				t.Errorf("violation paths %q, want %q", got, tt.paths)
			}
		})
	}
}

// TestEventEnvelopes checks the events real commands cause: exactly the
// envelope members, deterministic ids, agentbus as source, a fresh time,
// an absolute and resolvable dataschema for typed events and none for
// untyped ones.
func TestEventEnvelopes(t *testing.T) {
	t.Parallel()
	s := start(t)
	startTime := time.Now().Add(-time.Minute)
	v2 := command("PlaceOrder", "place-order/2.0", map[string]any{
		"orderId": "o-env-2", "customer": "ada", "currency": "EUR", "items": []any{map[string]any{"sku": "A", "quantity": 1}}})
	tests := []struct {
		name       string
		env        map[string]any
		typ        string
		dataschema string // path on s.URL; "" = untyped
		sameData   bool
	}{
		{"PlaceOrder 1.0", placeOrder("o-env-1"), "OrderPlaced", "/events/order-placed/1.0", true},
		{"PlaceOrder 2.0", v2, "OrderPlaced", "/events/order-placed/1.0", true},
		{"AddNote (untyped event)", command("AddNote", "add-note/1.0", map[string]any{"text": "hi"}), "NoteAdded", "", true},
		{"CancelOrder of no order", command("CancelOrder", "cancel-order/1.0", map[string]any{"orderId": "o-none", "reason": "r"}),
			"CommandRejected", "/events/command-rejected/1.0", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id := submitCommand(t, s.URL, tt.env)
			ev := eventsOf(t, s.URL, id, 1)[0]
			plCheckEnvelope(t, s, ev)
			if ev["type"] != tt.typ {
				t.Fatalf("type %v, want %s", ev["type"], tt.typ)
			}
			if want := envelope.EventID(id, 0, tt.typ); ev["id"] != want {
				t.Errorf("id %v, want the deterministic %s", ev["id"], want)
			}
			if ev["source"] != "agentbus" {
				t.Errorf("source %v", ev["source"])
			}
			tm, err := time.Parse(time.RFC3339Nano, ev["time"].(string))
			if err != nil || tm.Before(startTime) || tm.After(time.Now().Add(time.Minute)) {
				t.Errorf("time %v", ev["time"])
			}
			ds, has := ev["dataschema"]
			switch {
			case tt.dataschema == "" && has:
				t.Errorf("untyped event carries dataschema %v", ds)
			case tt.dataschema != "":
				if ds != s.URL+tt.dataschema {
					t.Errorf("dataschema %v, want %s", ds, s.URL+tt.dataschema)
				} else if r := get(t, ds.(string)); r.Status != 200 {
					t.Errorf("dataschema %s does not resolve: %d", ds, r.Status)
				}
			}
			if want := plClone(tt.env)["data"]; tt.sameData && !reflect.DeepEqual(ev["data"], want) {
				t.Errorf("data %v, want the command's %v", ev["data"], want)
			}
		})
	}
}

// plCheckEnvelope checks an event has exactly the envelope's members with
// their constant values.
func plCheckEnvelope(t *testing.T, s *server.Server, ev map[string]any) {
	t.Helper()
	for k := range ev {
		if !slices.Contains(plEnvelopeMembers, k) {
			t.Errorf("event member %q is not in the envelope", k)
		}
	}
	for _, k := range []string{"specversion", "id", "source", "type", "datacontenttype", "time", "data"} {
		if _, ok := ev[k]; !ok {
			t.Errorf("event lacks %s: %v", k, ev)
		}
	}
	if ev["specversion"] != "1.0" || ev["datacontenttype"] != "application/json" {
		t.Errorf("specversion %v datacontenttype %v", ev["specversion"], ev["datacontenttype"])
	}
	if _, ok := ev["data"].(map[string]any); !ok {
		t.Errorf("data is not an object: %v", ev["data"])
	}
	if ds, ok := ev["dataschema"].(string); ok && !strings.HasPrefix(ds, s.URL+"/events/") {
		t.Errorf("dataschema %q is not an absolute event schema URI", ds)
	}
}

// TestEventsByCorrelationAndType combines the correlationId and type
// filters over real commands.
func TestEventsByCorrelationAndType(t *testing.T) {
	t.Parallel()
	s := start(t)
	// Each command is decided before the next is submitted: the order of
	// the log (OrderPlaced, NoteAdded, CommandRejected) is what the
	// subtests below rely on, and commands of different correlations have
	// no defined processing order.
	submit := func(env map[string]any) string {
		t.Helper()
		id := submitCommand(t, s.URL, env)
		eventsOf(t, s.URL, id, 1)
		return id
	}
	placed := submit(placeOrder("o-c1"))
	submit(command("AddNote", "add-note/1.0", map[string]any{"text": "n"}))
	rejected := submit(placeOrder("o-c1"))
	count := func(q string) int { return len(plList(t, s, "/events?"+q).Events) }
	tests := []struct {
		query string
		want  int
	}{
		{"correlationId=" + placed, 1},
		{"correlationId=" + placed + "&type=OrderPlaced", 1},
		{"correlationId=" + placed + "&type=CommandRejected", 0},
		{"correlationId=" + rejected + "&type=CommandRejected", 1},
		{"correlationId=" + rejected + "&type=OrderPlaced&type=CommandRejected", 1},
		{"correlationId=" + placed + "&after=" + s.Ops.Reader().Cursor(envelope.DefaultTenant, false, 999999), 0},
		{"correlationId=00000000-0000-5000-8000-000000000000", 0},
		{"correlationId=never-submitted", 0},
		{"type=OrderPlaced", 1},
		{"type=CommandRejected", 1},
		{"type=NoteAdded&type=OrderPlaced", 2},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			if got := count(tt.query); got != tt.want {
				t.Errorf("%d events, want %d", got, tt.want)
			}
		})
	}
	t.Run("two types in stream order", func(t *testing.T) {
		t.Parallel()
		p := plList(t, s, "/events?type=OrderPlaced&type=NoteAdded")
		if len(p.Events) != 2 || p.Events[0]["type"] != "OrderPlaced" || p.Events[1]["type"] != "NoteAdded" {
			t.Errorf("events %v", p.Events)
		}
	})
	t.Run("the correlation page's cursor", func(t *testing.T) {
		t.Parallel()
		p := plList(t, s, "/events?correlationId="+placed)
		again := plList(t, s, "/events?correlationId="+placed+"&after="+p.Next)
		if len(again.Events) != 0 {
			t.Errorf("resuming after the page returned %d events", len(again.Events))
		}
		all := plList(t, s, "/events")
		if len(all.Events) != 3 || fmt.Sprint(all.Events[0]["id"]) != fmt.Sprint(p.Events[0]["id"]) {
			t.Errorf("log %v", plIDs(all.Events))
		}
	})
}

// TestUnservableEventsAreSkipped: a message published straight to the
// event stream that is not a JSON object cannot fail the pages and traces
// that cover it: it is left out and the cursor moves past it.
func TestUnservableEventsAreSkipped(t *testing.T) {
	t.Parallel()
	s := start(t)
	good := plSeed(t, s, []string{"SeedA"})
	for i, body := range []string{"not json at all", "", `{"a":1} trailing`, `[1,2]`, `"x"`} {
		m := nats.NewMsg("agentbus.evt.default._._.Junk")
		m.Data = []byte(body)
		m.Header.Set("Agentbus-Correlation-Id", "junk-1")
		m.Header.Set("Nats-Msg-Id", fmt.Sprintf("junk-%d", i))
		if _, err := s.Conn.JS.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	good = append(good, plSeed(t, s, []string{"SeedB"})...)
	for _, limit := range []int{1, 2, 100} {
		if got := plIDs(plWalk(t, s, url.Values{}, limit)); !slices.Equal(got, good) {
			t.Errorf("pages of %d: %v, want %v", limit, got, good)
		}
	}
	if got := plWalk(t, s, url.Values{"type": {"Junk"}}, 2); len(got) != 0 {
		t.Errorf("type=Junk: %v", got)
	}
	if p := plList(t, s, "/events?type=Junk&type=SeedB"); len(p.Events) != 1 {
		t.Errorf("type=Junk&type=SeedB: %d events", len(p.Events))
	}
	testkit.Eventually(t, "the junk's receipt", func() bool {
		r := get(t, s.URL+"/traces/junk-1")
		if r.Status == 500 {
			t.Fatalf("trace: %s", r.Body)
		}
		return r.Status == 200 && len(r.JSON(t)["events"].([]any)) == 0
	})
	if p := plList(t, s, "/events?correlationId=junk-1"); len(p.Events) != 0 {
		t.Errorf("correlationId=junk-1: %d events", len(p.Events))
	}
}
