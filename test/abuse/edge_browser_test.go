package abuse_test

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestEdgeHostWithoutAuth: without authentication, a request naming a host
// that is neither agentbus's public one nor a loopback name (a DNS
// rebinding page's) is refused 403 on every route; agentbus's own names
// are served.
func TestEdgeHostWithoutAuth(t *testing.T) {
	t.Parallel()
	s := testkit.Agentbus(t, testkit.NoNATSPort, func(c *settings.Config) { c.PublicURL = "https://bus.example.com/api" })
	_, port, _ := net.SplitHostPort(s.Addr)
	client := &http.Client{Timeout: 5 * time.Second}
	for _, c := range []struct {
		host string
		ok   bool
	}{
		{"rebind.example:" + port, false},
		{"rebind.example", false},
		{"localhost.rebind.example:" + port, false},
		{"bus.example.com.rebind.example", false},
		{"127.0.0.1:" + port, true},
		{"localhost:" + port, true},
		{"LOCALHOST:" + port, true},
		{"[::1]:" + port, true},
		{"bus.example.com", true},
		{"bus.example.com:443", true},
	} {
		for _, r := range []struct{ method, path, ct, body string }{
			{http.MethodGet, "/events?limit=1", "", ""},
			{http.MethodGet, "/.well-known/agentproto", "", ""},
			{http.MethodGet, "/openapi.json", "", ""},
			{http.MethodPost, "/agents/nobody/pause", "", ""},
			{http.MethodGet, "/no/such/route", "", ""},
		} {
			status, _, body, err := testkit.Send(client, r.method, s.URL+r.path, r.ct, []byte(r.body), "Host", c.host)
			if err != nil {
				t.Fatal(err)
			}
			refused := status == http.StatusForbidden && edgeCode(body) == "FORBIDDEN"
			if refused == c.ok {
				t.Errorf("Host %s, %s %s: %d %.200s", c.host, r.method, r.path, status, body)
			}
		}
	}
}

// TestEdgeFormPosts: a body whose media type is not JSON is refused 415 on
// every route, those that take no body included, so a cross-site form
// cannot pause an agent; the agent stays active.
func TestEdgeFormPosts(t *testing.T) {
	t.Parallel()
	s := testkit.Agentbus(t, testkit.NoNATSPort)
	client := &http.Client{Timeout: 10 * time.Second}
	status, _, body, err := testkit.Send(client, http.MethodPost, s.URL+"/agents", "application/json",
		[]byte(`{"id":"shipper","name":"Shipping agent","accepts":["ShipOrder"],"produces":["OrderShipped"]}`))
	if err != nil || status != http.StatusCreated {
		t.Fatalf("register: %d %v %s", status, err, body)
	}
	for _, c := range []struct{ method, path, ct, body string }{
		{http.MethodPost, "/agents/shipper/pause", "application/x-www-form-urlencoded", "a=b"},
		{http.MethodPost, "/agents/shipper/pause", "application/x-www-form-urlencoded", ""},
		{http.MethodPost, "/agents/shipper/pause", "text/plain", "x"},
		{http.MethodPost, "/agents/shipper/pause", "text/plain;charset=UTF-8", ""},
		{http.MethodPost, "/agents/shipper/pause", "multipart/form-data; boundary=x", "--x--\r\n"},
		{http.MethodPost, "/agents/shipper/pause", "", "a=b"},
		{http.MethodPost, "/agents/shipper/resume", "text/plain", "x"},
		{http.MethodDelete, "/agents/shipper", "application/x-www-form-urlencoded", "a=b"},
		{http.MethodPost, "/commands", "text/plain", "{}"},
		{http.MethodPost, "/agents", "application/x-www-form-urlencoded", "id=x"},
	} {
		status, _, body, err := testkit.Send(client, c.method, s.URL+c.path, c.ct, []byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusUnsupportedMediaType || edgeCode(body) != "UNSUPPORTED_MEDIA_TYPE" {
			t.Errorf("%s %s as %q: %d %s", c.method, c.path, c.ct, status, body)
		}
	}
	status, _, body, err = testkit.Send(client, http.MethodGet, s.URL+"/agents/shipper", "", nil)
	var rec struct {
		Status string `json:"status"`
	}
	if err != nil || status != http.StatusOK || json.Unmarshal(body, &rec) != nil || rec.Status != "active" {
		t.Fatalf("the agent after the forms: %d %v %s", status, err, body)
	}
	// JSON, or no body at all, is what a route without a body takes.
	for _, ct := range []string{"", "application/json"} {
		path := map[string]string{"": "/agents/shipper/pause", "application/json": "/agents/shipper/resume"}[ct]
		status, _, body, err := testkit.Send(client, http.MethodPost, s.URL+path, ct, nil)
		if err != nil || status != http.StatusNoContent {
			t.Errorf("POST %s with Content-Type %q and no body: %d %v %s", path, ct, status, err, body)
		}
	}
}

// TestEdgeErrorsEchoLittle: an error answer quotes at most a little of
// what the request sent, however much that was.
func TestEdgeErrorsEchoLittle(t *testing.T) {
	t.Parallel()
	s := testkit.Agentbus(t, testkit.NoNATSPort)
	client := &http.Client{Timeout: 10 * time.Second}
	long := strings.Repeat("a", 20000)
	for _, c := range []struct {
		method, path, ct string
		status           int
	}{
		{http.MethodGet, "/" + long, "", http.StatusNotFound},
		{http.MethodPut, "/events/" + long, "", http.StatusNotFound},
		{http.MethodGet, "/events?" + long + "=1", "", http.StatusBadRequest},
		{http.MethodPost, "/commands", "text/" + long, http.StatusUnsupportedMediaType},
		{http.MethodPost, "/commands", "application/json; charset=" + long, http.StatusUnsupportedMediaType},
	} {
		status, _, body, err := testkit.Send(client, c.method, s.URL+c.path, c.ct, []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if status != c.status || edgeCode(body) == "" || len(body) > 2048 {
			t.Errorf("%s %.40s… (%s): %d, %d bytes: %.300s", c.method, c.path, c.ct[:min(len(c.ct), 40)], status, len(body), body)
		}
	}
	// A path past the header limit is not read at all: 431 (the server
	// then closes the connection with the rest of the path unread, so
	// reading the short answer's body may fail).
	status, _, body, err := testkit.Send(client, http.MethodGet, s.URL+"/"+strings.Repeat("a", 900<<10), "", nil)
	if status != http.StatusRequestHeaderFieldsTooLarge || len(body) > 2048 {
		t.Errorf("a 900 KB path: %d %v, %d bytes", status, err, len(body))
	}
}
