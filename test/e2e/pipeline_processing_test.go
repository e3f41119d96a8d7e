package e2e_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
)

// plRejection returns the data of a CommandRejected event, failing on any
// other event.
func plRejection(t *testing.T, ev map[string]any) (commandID, commandType, code, message string) {
	t.Helper()
	if ev["type"] != "CommandRejected" {
		t.Fatalf("event %v, want CommandRejected", ev)
	}
	d, _ := ev["data"].(map[string]any)
	str := func(k string) string { v, _ := d[k].(string); return v }
	return str("commandId"), str("commandType"), str("code"), str("message")
}

func TestProcessingOutcomes(t *testing.T) {
	t.Parallel()
	s := start(t)
	t.Run("second PlaceOrder of one order is rejected", func(t *testing.T) {
		t.Parallel()
		first := submitCommand(t, s.URL, placeOrder("o-twice"))
		if ev := eventsOf(t, s.URL, first, 1)[0]; ev["type"] != "OrderPlaced" {
			t.Fatalf("first: %v", ev)
		}
		second := submitCommand(t, s.URL, placeOrder("o-twice"))
		id, typ, code, msg := plRejection(t, eventsOf(t, s.URL, second, 1)[0])
		if id != second || typ != "PlaceOrder" || code != "AGGREGATE_ALREADY_EXISTS" || msg == "" {
			t.Errorf("rejection %s %s %s %q", id, typ, code, msg)
		}
	})
	t.Run("CancelOrder of an unknown order is rejected", func(t *testing.T) {
		t.Parallel()
		id := submitCommand(t, s.URL, command("CancelOrder", "cancel-order/1.0", map[string]any{"orderId": "o-ghost", "reason": "r"}))
		cid, typ, code, _ := plRejection(t, eventsOf(t, s.URL, id, 1)[0])
		if cid != id || typ != "CancelOrder" || code != "AGGREGATE_NOT_FOUND" {
			t.Errorf("rejection %s %s %s", cid, typ, code)
		}
	})
	t.Run("CancelOrder of a placed order", func(t *testing.T) {
		t.Parallel()
		eventsOf(t, s.URL, submitCommand(t, s.URL, placeOrder("o-cancel")), 1)
		id := submitCommand(t, s.URL, command("CancelOrder", "cancel-order/1.0", map[string]any{"orderId": "o-cancel", "reason": "r"}))
		if ev := eventsOf(t, s.URL, id, 1)[0]; ev["type"] != "OrderCancelled" {
			t.Errorf("event %v", ev)
		}
		if n := testkit.AggregateMsgs(t, s.Conn.JS, plEvents, "default", "order", "o-cancel"); n != 2 {
			t.Errorf("order o-cancel has %d events, want 2", n)
		}
	})
	t.Run("PlaceOrder 2.0", func(t *testing.T) {
		t.Parallel()
		id := submitCommand(t, s.URL, command("PlaceOrder", "place-order/2.0", map[string]any{
			"orderId": "o-v2", "customer": "ada", "currency": "CHF", "items": []any{map[string]any{"sku": "A", "quantity": 1}}}))
		ev := eventsOf(t, s.URL, id, 1)[0]
		if ev["type"] != "OrderPlaced" || ev["data"].(map[string]any)["currency"] != "CHF" {
			t.Errorf("event %v", ev)
		}
	})
	t.Run("AddNote gives an untyped NoteAdded", func(t *testing.T) {
		t.Parallel()
		id := submitCommand(t, s.URL, command("AddNote", "add-note/1.0", map[string]any{"text": "remember"}))
		ev := eventsOf(t, s.URL, id, 1)[0]
		if ev["type"] != "NoteAdded" || ev["data"].(map[string]any)["text"] != "remember" {
			t.Errorf("event %v", ev)
		}
		if _, has := ev["dataschema"]; has {
			t.Errorf("untyped event has a dataschema: %v", ev)
		}
		if n := testkit.SubjectMsgs(t, s.Conn.JS, plEvents, "agentbus.evt.default._._.NoteAdded"); n < 1 {
			t.Errorf("NoteAdded not on the no-aggregate subject")
		}
	})
}

// TestConcurrentPlaceOrderOneOrder sends 50 PlaceOrder commands for one
// new order at once: optimistic concurrency lets exactly one through.
func TestConcurrentPlaceOrderOneOrder(t *testing.T) {
	t.Parallel()
	s := start(t)
	const n = 50
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := placeOrder("o-contended")
			env["data"].(map[string]any)["customer"] = fmt.Sprint("customer-", i)
			status, id, err := plTry(s, env)
			if err != nil || status != 202 {
				t.Errorf("command %d: %d %v", i, status, err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	placed, rejected := 0, 0
	for i, id := range ids {
		ev := eventsOf(t, s.URL, id, 1)[0]
		switch ev["type"] {
		case "OrderPlaced":
			placed++
		case "CommandRejected":
			if _, _, code, _ := plRejection(t, ev); code != "AGGREGATE_ALREADY_EXISTS" {
				t.Errorf("command %d rejected with %s", i, code)
			}
			rejected++
		default:
			t.Errorf("command %d: event %v", i, ev)
		}
	}
	if placed != 1 || rejected != n-1 {
		t.Errorf("%d OrderPlaced and %d CommandRejected, want 1 and %d", placed, rejected, n-1)
	}
	if got := testkit.AggregateMsgs(t, s.Conn.JS, plEvents, "default", "order", "o-contended"); got != 1 {
		t.Errorf("the order aggregate has %d events, want 1", got)
	}
	if p := plList(t, s, "/events?type=OrderPlaced"); len(p.Events) != 1 {
		t.Errorf("GET /events?type=OrderPlaced: %d events", len(p.Events))
	}
}

// plPublish stores a command straight on NATS, as an internal service
// would, and returns its stream sequence.
func plPublish(t *testing.T, s *server.Server, subject string, data []byte, hdr ...string) uint64 {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	ack, err := s.Conn.JS.PublishMsg(plCtx(t), m)
	if err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	if ack.Duplicate {
		t.Fatalf("publish %s: stored before", subject)
	}
	return ack.Sequence
}

// plRejectedFor finds, through GET /events?type=CommandRejected, the
// rejection of command corr.
func plRejectedFor(t *testing.T, s *server.Server, corr string) map[string]any {
	t.Helper()
	var found map[string]any
	testkit.Eventually(t, "the CommandRejected of "+corr, func() bool {
		for _, ev := range plWalk(t, s, map[string][]string{"type": {"CommandRejected"}}, 1000) {
			if id, _, _, _ := plRejection(t, ev); id == corr {
				found = ev
				return true
			}
		}
		return false
	})
	return found
}

// TestCommandsPublishedOnNATS: commands an internal service publishes
// straight on the command subjects get the same outcomes.
func TestCommandsPublishedOnNATS(t *testing.T) {
	t.Parallel()
	s := start(t)
	raw := func(mutate func(map[string]any)) []byte {
		env := placeOrder("o-nats")
		mutate(env)
		b, _ := json.Marshal(env)
		return b
	}
	// The correlation id of a command is the one its tenant, source and
	// id derive; a publisher may put it in the header, as POST /commands
	// does.
	corrOf := func(id string) string { return envelope.CorrelationID("default", "nats-service", id) }
	withID := func(id string, mutate func(map[string]any)) []byte {
		return raw(func(m map[string]any) { m["id"], m["source"] = id, "nats-service"; mutate(m) })
	}
	t.Run("invalid envelope with a correlation header", func(t *testing.T) {
		t.Parallel()
		corr := corrOf("nats-invalid-1")
		plPublish(t, s, "agentbus.cmd.default.PlaceOrder", withID("nats-invalid-1", func(m map[string]any) { delete(m, "time") }),
			"Agentbus-Correlation-Id", corr)
		ev := plRejectedFor(t, s, corr)
		if _, typ, code, msg := plRejection(t, ev); typ != "PlaceOrder" || code != "VALIDATION_FAILED" || !strings.Contains(msg, "$.time") {
			t.Errorf("rejection %v, want VALIDATION_FAILED naming $.time", ev["data"])
		}
		eventsOf(t, s.URL, corr, 1)
	})
	t.Run("a correlation header that is not the command's", func(t *testing.T) {
		t.Parallel()
		corr := corrOf("nats-forged-1")
		plPublish(t, s, "agentbus.cmd.default.PlaceOrder", withID("nats-forged-1", func(m map[string]any) {
			m["data"].(map[string]any)["orderId"] = "o-forged"
		}), "Agentbus-Correlation-Id", "someone-elses-id")
		ev := plRejectedFor(t, s, corr)
		if _, _, code, msg := plRejection(t, ev); code != "VALIDATION_FAILED" || !strings.Contains(msg, "Agentbus-Correlation-Id") {
			t.Errorf("rejection %v", ev["data"])
		}
		if evs := plList(t, s, "/events?correlationId=someone-elses-id"); len(evs.Events) != 0 {
			t.Errorf("events under the header's id: %v", evs.Events)
		}
	})
	t.Run("invalid envelope without the header", func(t *testing.T) {
		t.Parallel()
		plPublish(t, s, "agentbus.cmd.default.PlaceOrder", raw(func(m map[string]any) {
			m["id"], m["source"], m["datacontenttype"] = "raw-7", "billing-service", "text/plain"
		}))
		corr := envelope.CorrelationID("default", "billing-service", "raw-7")
		ev := plRejectedFor(t, s, corr)
		if _, _, code, _ := plRejection(t, ev); code != "VALIDATION_FAILED" {
			t.Errorf("rejection %v", ev["data"])
		}
		eventsOf(t, s.URL, corr, 1)
	})
	t.Run("data failing its schema", func(t *testing.T) {
		t.Parallel()
		plPublish(t, s, "agentbus.cmd.default.PlaceOrder", withID("nats-schema-1", func(m map[string]any) { m["data"] = map[string]any{"orderId": "o-n"} }),
			"Agentbus-Correlation-Id", corrOf("nats-schema-1"))
		if _, _, code, _ := plRejection(t, plRejectedFor(t, s, corrOf("nats-schema-1"))); code != "VALIDATION_FAILED" {
			t.Errorf("code %s", code)
		}
	})
	t.Run("valid envelope without the header", func(t *testing.T) {
		t.Parallel()
		env := placeOrder("o-nats-valid")
		b, _ := json.Marshal(env)
		plPublish(t, s, "agentbus.cmd.default.PlaceOrder", b)
		corr := envelope.CorrelationID("default", env["source"].(string), env["id"].(string))
		if ev := eventsOf(t, s.URL, corr, 1)[0]; ev["type"] != "OrderPlaced" {
			t.Errorf("event %v", ev)
		}
	})
}

// TestRepublishedCommandNotDuplicated publishes a command on NATS, lets
// it be processed, then stores the same message again under a new
// Nats-Msg-Id (past JetStream's deduplication): the processor sees it a
// second time and must not duplicate its events.
func TestRepublishedCommandNotDuplicated(t *testing.T) {
	t.Parallel()
	s := start(t)
	tests := []struct {
		name, subject string
		env           map[string]any
		event         string
		// between runs another command before the copy arrives.
		between map[string]any
	}{
		{"aggregate command", "agentbus.cmd.default.PlaceOrder", placeOrder("o-republish"), "OrderPlaced", nil},
		{"command without aggregate", "agentbus.cmd.default.AddNote", command("AddNote", "add-note/1.0", map[string]any{"text": "once"}), "NoteAdded", nil},
		{"aggregate moved on in between", "agentbus.cmd.default.PlaceOrder", placeOrder("o-moved"), "OrderPlaced",
			command("CancelOrder", "cancel-order/1.0", map[string]any{"orderId": "o-moved", "reason": "r"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, _ := json.Marshal(tt.env)
			corr := envelope.CorrelationID("default", tt.env["source"].(string), tt.env["id"].(string))
			plPublish(t, s, tt.subject, body, "Agentbus-Correlation-Id", corr, "Nats-Msg-Id", corr)
			first := eventsOf(t, s.URL, corr, 1)[0]
			if first["type"] != tt.event {
				t.Fatalf("event %v", first)
			}
			if tt.between != nil {
				eventsOf(t, s.URL, submitCommand(t, s.URL, tt.between), 1)
			}
			testkit.WaitIdle(t, s.Conn.JS, testkit.PipelineConsumers()...)
			events := testkit.StreamState(t, s.Conn.JS, plEvents).Msgs

			plPublish(t, s, tt.subject, body, "Agentbus-Correlation-Id", corr, "Nats-Msg-Id", corr+"-copy")
			testkit.WaitIdle(t, s.Conn.JS, testkit.PipelineConsumers()...)
			evs := eventsOf(t, s.URL, corr, 1)
			if evs[0]["id"] != first["id"] || evs[0]["type"] != tt.event {
				t.Errorf("after the copy: %v", evs)
			}
			if n := testkit.StreamState(t, s.Conn.JS, plEvents).Msgs; n != events {
				t.Errorf("the copy added %d events", n-events)
			}
		})
	}
}
