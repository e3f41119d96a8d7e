package e2e_test

// Helpers of the command → event pipeline suite (names start with "pl").

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	plCommands = "AGENTBUS_COMMANDS"
	plEvents   = "AGENTBUS_EVENTS"
)

// plEnvelopeMembers are the only top-level members an envelope may have.
var plEnvelopeMembers = []string{"specversion", "id", "source", "type", "datacontenttype", "dataschema", "time", "data"}

func plCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// plErrBody is the spec's error body with the violations agentbus lists.
type plErrBody struct {
	Code       string
	Message    string
	Details    map[string]any
	Violations []struct{ Path, Message string }
}

// plError checks r is an error body with status and code, and returns it.
func plError(t *testing.T, r *response, status int, code string) *plErrBody {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type %q, want application/json", ct)
	}
	var top map[string]map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &top); err != nil || len(top) != 1 || top["error"] == nil {
		t.Fatalf("not the spec's error body: %s", r.Body)
	}
	for _, k := range []string{"code", "message", "details"} {
		if _, ok := top["error"][k]; !ok {
			t.Fatalf("error body without error.%s: %s", k, r.Body)
		}
	}
	var b struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &b)
	out := &plErrBody{Code: b.Error.Code, Message: b.Error.Message, Details: b.Error.Details}
	if out.Code != code || out.Message == "" || out.Details == nil {
		t.Fatalf("error %s %q details %v, want code %s with a message and details: %s", out.Code, out.Message, out.Details, code, r.Body)
	}
	if vs, ok := b.Error.Details["violations"]; ok {
		raw, _ := json.Marshal(vs)
		_ = json.Unmarshal(raw, &out.Violations)
	}
	return out
}

// paths returns the violation paths, sorted.
func (b *plErrBody) paths() []string {
	var out []string
	for _, v := range b.Violations {
		out = append(out, v.Path)
	}
	slices.Sort(out)
	return out
}

// plPage is one page of GET /events.
type plPage struct {
	Events []map[string]any `json:"events"`
	Next   string           `json:"next"`
}

// plList GETs an events URL (path and query relative to s.URL) and
// expects 200.
func plList(t *testing.T, s *server.Server, pathAndQuery string) plPage {
	t.Helper()
	r := get(t, s.URL+pathAndQuery)
	if r.Status != 200 {
		t.Fatalf("GET %s: %d %s", pathAndQuery, r.Status, r.Body)
	}
	var p plPage
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("GET %s: %v: %s", pathAndQuery, err, r.Body)
	}
	return p
}

// plWalk follows next cursors from the start until an empty page and
// returns every event of every page, checking each page holds at most
// limit events.
func plWalk(t *testing.T, s *server.Server, query url.Values, limit int) []map[string]any {
	t.Helper()
	var all []map[string]any
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("limit", fmt.Sprint(limit))
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatal("paging does not end")
		}
		p := plList(t, s, "/events?"+q.Encode())
		if len(p.Events) > limit {
			t.Fatalf("page of %d events with limit %d", len(p.Events), limit)
		}
		if p.Next == "" {
			t.Fatalf("page without a next cursor")
		}
		if len(p.Events) == 0 {
			if p.Next != q.Get("after") && q.Get("after") != "" {
				t.Errorf("empty page moved the cursor from %s to %s", q.Get("after"), p.Next)
			}
			return all
		}
		all = append(all, p.Events...)
		q.Set("after", p.Next)
	}
}

// plIDs returns the ids of events.
func plIDs(evs []map[string]any) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i], _ = e["id"].(string)
	}
	return out
}

// plEvent is a valid event envelope for seeding the event stream.
func plEvent(id, typ string, data map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{
		"specversion": "1.0", "id": id, "source": "seed", "type": typ, "datacontenttype": "application/json",
		"time": time.Now().UTC().Format(time.RFC3339Nano), "data": data,
	})
	return b
}

// plSeed appends events straight to the event stream, without an
// aggregate or correlation, in the order given; it returns their ids.
// Event i's data is {"n": i} and the fields of pad, if any.
func plSeed(t *testing.T, s *server.Server, types []string, pad ...map[string]any) []string {
	t.Helper()
	ids := make([]string, len(types))
	var futures []jetstream.PubAckFuture
	for i, typ := range types {
		ids[i] = fmt.Sprintf("seed-%s-%d", strings.ToLower(typ), i)
		m := nats.NewMsg("agentbus.evt.default._._." + typ)
		data := map[string]any{"n": i}
		for _, p := range pad {
			maps.Copy(data, p)
		}
		m.Data = plEvent(ids[i], typ, data)
		m.Header.Set("Nats-Msg-Id", ids[i])
		// A loaded machine may take longer than the default 200 ms to
		// free a slot in the publish window.
		f, err := s.Conn.JS.PublishMsgAsync(m, jetstream.WithStallWait(30*time.Second))
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		futures = append(futures, f)
	}
	select {
	case <-s.Conn.JS.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		t.Fatal("seeding did not complete")
	}
	var last uint64
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Sequence <= last {
				t.Fatalf("seed %d stored out of order", i)
			}
			last = ack.Sequence
		case err := <-f.Err():
			t.Fatalf("seed %d: %v", i, err)
		}
	}
	return ids
}

// plPost sends body to /commands with a content type (and an unknown
// length when chunked).
func plPost(t *testing.T, s *server.Server, contentType string, body []byte, chunked bool) *response {
	t.Helper()
	var rd io.Reader = bytes.NewReader(body)
	if chunked {
		rd = struct{ io.Reader }{rd}
	}
	req, err := http.NewRequest(http.MethodPost, s.URL+"/commands", rd)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /commands: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return &response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// plClone deep-copies a JSON-shaped map.
func plClone(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// plTry posts env to /commands without touching t, for goroutines: it
// returns the status and the id of a 202, and an error carrying the body
// of any other answer. A 503 (a busy replica's answer, which a client
// retries) is asked again every 200 ms for up to busyWait.
func plTry(s *server.Server, env any) (int, string, error) {
	deadline := time.Now().Add(busyWait)
	for {
		status, raw, err := tryJSON(http.MethodPost, s.URL+"/commands", env)
		if err != nil {
			return status, "", err
		}
		if status == http.StatusServiceUnavailable && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if status != 202 {
			return status, "", fmt.Errorf("answered %s", raw)
		}
		var body struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(raw, &body)
		if body.ID == "" {
			return status, "", fmt.Errorf("202 without an id: %s", raw)
		}
		return status, body.ID, nil
	}
}
