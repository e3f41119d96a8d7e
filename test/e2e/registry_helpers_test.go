package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// regCatalogs loads the example domain and the example agent's catalogue,
// whose ChargeCustomer has no processor inside agentbus (agents take it).
func regCatalogs(c *config.Config) {
	c.Catalog.Dirs = []string{"../../config/catalog", "../../cmd/example-agent/catalog"}
}

// regOn returns a config mutation pointing agentbus at url.
func regOn(url string) func(*config.Config) {
	return func(c *config.Config) { c.NATS.URL = url }
}

// regJS connects a plain JetStream client to url.
func regJS(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// regCall is a goroutine-safe HTTP call: it returns an error instead of
// failing the test.
func regCall(method, url string, body any) (int, []byte, error) {
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

// regDo calls and fails the test on transport errors.
func regDo(t *testing.T, method, url string, body any) *response {
	t.Helper()
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
		return do(t, method, url, "application/json", b)
	}
	return do(t, method, url, "", nil)
}

// regExpect checks a response's status (and error code when code is
// set); it is auExpect.
func regExpect(t *testing.T, what string, r *response, status int, code string) {
	t.Helper()
	auExpect(t, what, r, status, code)
}

// chargeCustomer is a ChargeCustomer command envelope.
func chargeCustomer(orderID string) map[string]any {
	return command("ChargeCustomer", "charge-customer/1.0", map[string]any{"customerId": "ada", "orderId": orderID, "amount": 100})
}

// regSubmit posts a command and returns its correlation id.
func regSubmit(t *testing.T, base string, env map[string]any) string {
	t.Helper()
	r := postJSON(t, base+"/commands", env)
	if r.Status != http.StatusAccepted {
		t.Fatalf("submit %v: %d %s", env["type"], r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}

// regConsumer returns the info of a consumer on the command stream, or nil.
func regConsumer(t *testing.T, js jetstream.JetStream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, "AGENTBUS_COMMANDS", name)
	if err != nil {
		if err == jetstream.ErrConsumerNotFound {
			return nil
		}
		t.Fatalf("consumer %s: %v", name, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// regCount counts the events of a type in the log (GET /events?type=).
func regCount(t *testing.T, base, typ string) int {
	t.Helper()
	n, after := 0, ""
	for {
		url := fmt.Sprintf("%s/events?type=%s&limit=1000", base, typ)
		if after != "" {
			url += "&after=" + after
		}
		r := get(t, url)
		if r.Status != 200 {
			t.Fatalf("GET events: %d %s", r.Status, r.Body)
		}
		var pg struct {
			Events []json.RawMessage `json:"events"`
			Next   string            `json:"next"`
		}
		_ = json.Unmarshal(r.Body, &pg)
		n += len(pg.Events)
		if len(pg.Events) == 0 {
			return n
		}
		after = pg.Next
	}
}

// regTimestamp fails unless rec[field] is an RFC 3339 timestamp string,
// and returns it parsed.
func regTimestamp(t *testing.T, what string, rec map[string]any, field string) time.Time {
	t.Helper()
	s, ok := rec[field].(string)
	if !ok {
		t.Fatalf("%s %s is %#v, want an RFC 3339 timestamp string", what, field, rec[field])
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s %s %q: %v", what, field, s, err)
	}
	return ts
}
