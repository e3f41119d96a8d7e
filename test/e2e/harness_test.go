package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// start runs agentbus in-process on a fresh embedded store and loopback port.
func start(t *testing.T, mutate ...func(*settings.Config)) *server.Server {
	t.Helper()
	return testkit.Agentbus(t, append([]func(*settings.Config){testkit.NoNATSPort}, mutate...)...)
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *response) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, r.Body)
	}
	return m
}

// errorCode returns error.code of an error body, failing when the body is
// not the spec's error body.
func (r *response) errorCode(t *testing.T) string {
	t.Helper()
	var b struct {
		Error *struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &b); err != nil || b.Error == nil || b.Error.Code == "" || b.Error.Message == "" || b.Error.Details == nil {
		t.Fatalf("not an error body (status %d): %s", r.Status, r.Body)
	}
	return b.Error.Code
}

// do sends a request with the default client; hdr holds header name,
// value pairs. It fails t when no answer came.
func do(t *testing.T, method, url, contentType string, body []byte, hdr ...string) *response {
	t.Helper()
	st, h, b, err := testkit.Send(http.DefaultClient, method, url, contentType, body, hdr...)
	if st == 0 {
		t.Fatal(err)
	}
	return &response{Status: st, Header: h, Body: b}
}

func get(t *testing.T, url string) *response { return do(t, http.MethodGet, url, "", nil) }

// head sends a HEAD request over a connection of its own and returns
// everything the server wrote after the header block as Body. Go's client
// would drop a body sent to a HEAD request unread, so it cannot show one.
func head(t *testing.T, rawURL string, hdr ...string) *response {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "HEAD %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", u.RequestURI(), u.Host)
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&req, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	req.WriteString("\r\n")
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(conn) // Connection: close: the server ends the stream
	if err != nil {
		t.Fatalf("HEAD %s: %v", rawURL, err)
	}
	end := bytes.Index(raw, []byte("\r\n\r\n"))
	if end < 0 {
		t.Fatalf("HEAD %s: no complete header block in %q", rawURL, raw)
	}
	res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw[:end+4])), &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatalf("HEAD %s: %v", rawURL, err)
	}
	return &response{Status: res.StatusCode, Header: res.Header, Body: raw[end+4:]}
}

func postJSON(t *testing.T, url string, v any) *response {
	t.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	return do(t, http.MethodPost, url, "application/json", b)
}

// plJSON marshals v.
func plJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// submitCommand posts env to base+"/commands", expects 202 and returns the
// correlation id it answers.
func submitCommand(t *testing.T, base string, env any) string {
	t.Helper()
	r := postJSON(t, base+"/commands", env)
	if r.Status != 202 {
		t.Fatalf("submit %v: %d %s", typeOf(env), r.Status, r.Body)
	}
	id, _ := r.JSON(t)["id"].(string)
	if id == "" {
		t.Fatalf("202 without an id: %s", r.Body)
	}
	return id
}

// typeOf returns the type member of an envelope map, for messages.
func typeOf(env any) any {
	if m, ok := env.(map[string]any); ok {
		return m["type"]
	}
	return "command"
}

// tryJSON sends body (JSON, when not nil) with method to url without
// touching t, for goroutines: it returns an error instead of failing the
// test.
func tryJSON(method, url string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

var seq atomic.Int64

// command returns a valid command envelope of typ with data.
func command(typ, schema string, data map[string]any) map[string]any {
	return map[string]any{
		"specversion": "1.0", "id": fmt.Sprintf("cmd-%d-%d", time.Now().UnixNano(), seq.Add(1)),
		"source": "e2e-test", "type": typ, "datacontenttype": "application/json",
		"dataschema": schema, "time": time.Now().UTC().Format(time.RFC3339), "data": data,
	}
}

func placeOrder(orderID string) map[string]any {
	return command("PlaceOrder", "place-order/1.0", map[string]any{
		"orderId": orderID, "customer": "ada", "items": []any{map[string]any{"sku": "A-1", "quantity": 2}},
	})
}

// busyWait bounds the waits that a machine running other suites beside
// this one has been seen to stretch past 10 s (processing behind 20,000
// seeded events, a push reaching a trace, a replica answering 503).
const busyWait = 30 * time.Second

// eventsOf polls GET /events?correlationId= until want events are there.
func eventsOf(t *testing.T, base, corr string, want int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(busyWait)
	for {
		r := get(t, base+"/events?correlationId="+corr)
		if r.Status == http.StatusServiceUnavailable && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // NATS reconnecting: asked again, as Retry-After says
			continue
		}
		if r.Status != 200 {
			t.Fatalf("GET events: %d %s", r.Status, r.Body)
		}
		var page struct {
			Events []map[string]any `json:"events"`
		}
		_ = json.Unmarshal(r.Body, &page)
		if len(page.Events) >= want || time.Now().After(deadline) {
			if len(page.Events) != want {
				t.Fatalf("correlation %s: want %d events, got %d: %s", corr, want, len(page.Events), r.Body)
			}
			return page.Events
		}
		time.Sleep(20 * time.Millisecond)
	}
}
