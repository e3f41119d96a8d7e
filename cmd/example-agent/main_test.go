package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// TestExampleAgent runs agentbus and this agent the way the README says:
// the agent registers itself, takes ChargeCustomer from its consumer,
// answers CustomerCharged, and logs one line per command with its
// correlation id, type and outcome; paused, it gets nothing; resumed, it
// gets what queued up.
func TestExampleAgent(t *testing.T) {
	s := testkit.Agentbus(t, func(c *settings.Config) { c.Catalog.Dirs = []string{"../../config/catalog", "catalog"} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var logs testkit.LockedBuffer
	go func() {
		done <- run(ctx, []string{"--nats", s.Conn.ClientURL(), "--agentbus", s.URL, "--register"}, &logs)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	testkit.Eventually(t, "agent registered", func() bool { return call(t, "GET", s.URL+"/agents/billing-agent", nil).status == 200 })

	corr := submit(t, s.URL, "o-1")
	if ev := waitEvent(t, s.URL, corr); ev.Type != "CustomerCharged" || ev.Data["chargedBy"] != "billing-agent" || ev.Data["orderId"] != "o-1" {
		t.Fatalf("event: %+v", ev)
	}
	again := submit(t, s.URL, "o-1")
	if ev := waitEvent(t, s.URL, again); ev.Type != "CommandRejected" || ev.Data["code"] != "AGGREGATE_ALREADY_EXISTS" {
		t.Fatalf("second charge of o-1: %+v", ev)
	}
	// One line per command, logged before its events are stored.
	for id, want := range map[string]string{
		corr:  `msg="handled command" correlationId=` + corr + ` type=ChargeCustomer outcome=CustomerCharged`,
		again: `msg="handled command" correlationId=` + again + ` type=ChargeCustomer outcome=rejected code=AGGREGATE_ALREADY_EXISTS reason="order \"o-1\" is charged already"`,
	} {
		lines := logs.Lines("correlationId=" + id)
		if len(lines) != 1 || !strings.Contains(lines[0], want) {
			t.Errorf("log lines of %s:\n%s\nwant one with\n%s", id, strings.Join(lines, "\n"), want)
		}
	}

	if r := call(t, "POST", s.URL+"/agents/billing-agent/pause", nil); r.status != 204 {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	// The agent's consumer delivers nothing while paused: once the held
	// command is stored and in its receipt, the consumer holds it pending,
	// delivered no further than before the pause and with nothing unacked.
	consumer := func() *jetstream.ConsumerInfo {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := s.Conn.JS.Consumer(ctx, "AGENTBUS_COMMANDS", bus.AgentConsumer("default", "billing-agent"))
		if err != nil {
			t.Fatalf("agent consumer: %v", err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatalf("agent consumer: %v", err)
		}
		return info
	}
	var before *jetstream.ConsumerInfo
	testkit.Eventually(t, "agent consumer paused with nothing pending or unacked", func() bool {
		before = consumer()
		return before.Paused && before.NumPending == 0 && before.NumAckPending == 0
	})
	held := submit(t, s.URL, "o-2")
	testkit.WaitIdle(t, s.Conn.JS, testkit.PipelineConsumers()...)
	// The server counts a paused consumer's pending messages a moment
	// after they are stored: wait for the count, and fail on any
	// delivery meanwhile.
	var ci *jetstream.ConsumerInfo
	testkit.Eventually(t, "the held command pending", func() bool {
		ci = consumer()
		if !ci.Paused || ci.NumAckPending != 0 || ci.Delivered.Consumer != before.Delivered.Consumer {
			t.Fatalf("paused agent consumer: paused=%v pending=%d unacked=%d delivered %d (before the held command %d)",
				ci.Paused, ci.NumPending, ci.NumAckPending, ci.Delivered.Consumer, before.Delivered.Consumer)
		}
		return ci.NumPending == 1
	})
	if n := len(events(t, s.URL, held)); n != 0 {
		t.Fatalf("paused agent processed a command (%d events)", n)
	}
	if r := call(t, "GET", s.URL+"/traces/"+held, nil); r.status != 200 || !bytes.Contains(r.body, []byte(`"status":"accepted"`)) {
		t.Fatalf("trace of a held command: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", s.URL+"/agents/billing-agent/resume", nil); r.status != 204 {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	if ev := waitEvent(t, s.URL, held); ev.Type != "CustomerCharged" || ev.Data["orderId"] != "o-2" {
		t.Fatalf("held command after resume: %+v", ev)
	}

	// Deleted, the agent loses its consumer, says so and waits until
	// stopped (the deferred cancel), returning nil then.
	if r := call(t, "DELETE", s.URL+"/agents/billing-agent", nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	running := func() {
		t.Helper()
		select {
		case err := <-done:
			done <- err // for the deferred stop
			t.Fatalf("the agent exited when deleted (%v); it should wait until stopped:\n%s", err, logs.String())
		default:
		}
	}
	testkit.Eventually(t, "the agent says its consumer was deleted", func() bool {
		running()
		return len(logs.Lines("consumer was deleted")) == 1
	})
	running()
}

type answer struct {
	status int
	body   []byte
}

func call(t *testing.T, method, url string, body any) answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, b}
}

var n int

func submit(t *testing.T, base, orderID string) string {
	t.Helper()
	n++
	r := call(t, "POST", base+"/commands", map[string]any{
		"specversion": "1.0", "id": fmt.Sprintf("charge-%d", n), "source": "example-agent-test", "type": "ChargeCustomer",
		"datacontenttype": "application/json", "dataschema": "charge-customer/1.0", "time": time.Now().UTC().Format(time.RFC3339),
		"data": map[string]any{"customerId": "ada", "orderId": orderID, "amount": 4200},
	})
	if r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var a struct{ ID string }
	_ = json.Unmarshal(r.body, &a)
	return a.ID
}

type event struct {
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

func events(t *testing.T, base, corr string) []event {
	t.Helper()
	r := call(t, "GET", base+"/events?correlationId="+corr, nil)
	var pg struct{ Events []event }
	_ = json.Unmarshal(r.body, &pg)
	return pg.Events
}

func waitEvent(t *testing.T, base, corr string) event {
	t.Helper()
	var evs []event
	testkit.Eventually(t, "event of "+corr, func() bool { evs = events(t, base, corr); return len(evs) > 0 })
	return evs[0]
}

// TestChargeRejectsUnreadableData: data the schema lets through but the
// agent cannot read (an amount past 64 bits) is rejected with a message
// in the sender's terms, not the decoder's.
func TestChargeRejectsUnreadableData(t *testing.T) {
	cmd := decide.Command{Tenant: "default", Type: "ChargeCustomer", Envelope: &envelope.Envelope{
		Data: []byte(`{"customerId":"ada","orderId":"o-9","amount":1e30}`),
	}}
	d, err := charge("billing-agent").Decide(context.Background(), cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "data: $.amount must be an integer from -9223372036854775808 to 9223372036854775807, not the number 1e30"
	if d.Reject == nil || d.Reject.Code != errs.CodeValidationFailed || d.Reject.Message != want {
		t.Fatalf("decision %+v, want the rejection %q", d.Reject, want)
	}
}
