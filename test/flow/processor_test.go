package flow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/projection"
)

// tripleTypes are the events tripleDecider emits, in order.
var tripleTypes = []string{"NoteAdded", "NoteTagged", "NoteFiled"}

// tripleDecider emits three events for one command; with aggregate set they
// go on the aggregate named by data.text and must be its first events.
func tripleDecider(aggregate bool) decide.Decider {
	return decide.DeciderFunc(func(_ context.Context, cmd decide.Command, _ decide.State) (decide.Decision, error) {
		var data struct{ Text string }
		if err := json.Unmarshal(cmd.Envelope.Data, &data); err != nil {
			return decide.Decision{}, err
		}
		var d decide.Decision
		for i, typ := range tripleTypes {
			ev := decide.NewEvent{Type: typ, Data: []byte(fmt.Sprintf(`{"n":%d,"text":%q}`, i, data.Text))}
			if aggregate {
				ev.AggType, ev.AggID = "note", data.Text
			}
			d.Events = append(d.Events, ev)
		}
		if aggregate {
			d.Expect = &bus.Expect{LastSeq: 0}
		}
		return d, nil
	})
}

// wireEvent is an event envelope as stored.
type wireEvent struct {
	members map[string]json.RawMessage
	env     *envelope.Envelope
}

func decodeEvent(t *testing.T, m *bus.Message) wireEvent {
	t.Helper()
	var w wireEvent
	if err := json.Unmarshal(m.Data, &w.members); err != nil {
		t.Fatalf("event %d is not a JSON object: %s", m.Seq, m.Data)
	}
	env, err := envelope.Decode(m.Data, envelope.Event)
	if err != nil {
		t.Fatalf("event %d is not a valid event envelope: %v\n%s", m.Seq, err, m.Data)
	}
	w.env = env
	return w
}

// checkEvents checks that evs are the events of the command (corr, cmdID)
// of the given types, in one contiguous run of sequences with
// deterministic ids and agentbus's headers.
func checkEvents(t *testing.T, evs []*bus.Message, corr, cmdID string, types []string) {
	t.Helper()
	if len(evs) != len(types) {
		t.Fatalf("command %s: %d events, want %d", corr, len(evs), len(types))
	}
	for i, m := range evs {
		if i > 0 && m.Seq != evs[i-1].Seq+1 {
			t.Errorf("command %s: events at sequences %d and %d are not contiguous", corr, evs[i-1].Seq, m.Seq)
		}
		w := decodeEvent(t, m)
		wantID := envelope.EventID(corr, i, types[i])
		if w.env.ID != wantID || w.env.Type != types[i] || w.env.Source != "agentbus" {
			t.Errorf("event %d: id %s type %s source %s; want %s %s agentbus", i, w.env.ID, w.env.Type, w.env.Source, wantID, types[i])
		}
		if _, err := time.Parse(time.RFC3339Nano, w.env.Time); err != nil {
			t.Errorf("event %d: time %q", i, w.env.Time)
		}
		if got := m.Header.Get(bus.HeaderMsgID); got != wantID {
			t.Errorf("event %d: Nats-Msg-Id %q, want the event id %s", i, got, wantID)
		}
		if got := m.Header.Get(bus.HeaderCorrelationID); got != corr {
			t.Errorf("event %d: correlation header %q, want %s", i, got, corr)
		}
		if cmdID != "" {
			if got := m.Header.Get(bus.HeaderCausationID); got != cmdID {
				t.Errorf("event %d: causation header %q, want %s", i, got, cmdID)
			}
		}
		for k := range w.members {
			if !slices.Contains([]string{"specversion", "id", "source", "type", "datacontenttype", "dataschema", "time", "data"}, k) {
				t.Errorf("event %d: member %q is not in the envelope", i, k)
			}
		}
	}
}

func seqs(ms []*bus.Message) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

func TestAtomicBatch(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, func(a *node) { a.Handle("AddNote", tripleDecider(false)) })

	const commands = 8
	type sent struct {
		acc *ingest.Accepted
		msg *bus.Message
		id  string
	}
	var cmds []sent
	for i := range commands {
		raw := command("AddNote", "add-note/1.0", map[string]any{"text": fmt.Sprintf("note %d", i)})
		acc, m := e.submit(raw)
		env, _ := envelope.Decode(raw, envelope.Command)
		cmds = append(cmds, sent{acc, m, env.ID})
	}

	// Other writers append to the event stream all along: a batch must not
	// be interleaved with them.
	stop := make(chan struct{})
	noiseDone := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				noiseDone <- n
				return
			default:
			}
			m := &bus.Message{Subject: "agentbus.evt.default._._.Noise", Header: bus.Header{bus.HeaderMsgID: {fmt.Sprintf("noise-%d", n)}},
				Data: []byte(`{}`)}
			if _, err := e.events.Append(context.Background(), []*bus.Message{m}, nil); err == nil {
				n++
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	var wg sync.WaitGroup
	outcomes := make([]string, commands)
	for i, c := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &delivery{msg: *c.msg, n: 1}
			e.app.ProcessCommand(context.Background(), d)
			outcomes[i] = d.settled()
		}()
	}
	wg.Wait()
	time.Sleep(20 * time.Millisecond)
	close(stop)
	if n := <-noiseDone; n == 0 {
		t.Fatal("the noise writer wrote nothing")
	}

	stored := map[string][]uint64{}
	for i, c := range cmds {
		if outcomes[i] != "ack" {
			t.Fatalf("command %d settled %q, want ack", i, outcomes[i])
		}
		evs := e.eventsOf(c.acc.ID)
		checkEvents(t, evs, c.acc.ID, c.id, tripleTypes)
		stored[c.acc.ID] = seqs(evs)
		r := e.receipt(c.acc.ID, func(r *projection.Receipt) bool { return len(r.Events) >= 3 })
		if !slices.Equal(r.Events, stored[c.acc.ID]) || r.Status != projection.StatusProcessed {
			t.Errorf("receipt of %s: status %s events %v, want processed %v", c.acc.ID, r.Status, r.Events, stored[c.acc.ID])
		}
		if r.CommandSeq != c.acc.Seq || r.Type != "AddNote" {
			t.Errorf("receipt of %s: commandSeq %d type %q, want %d AddNote", c.acc.ID, r.CommandSeq, r.Type, c.acc.Seq)
		}
	}
	total := len(e.allEvents())

	// The same deliveries again (a redelivery after a lost ack): nothing new.
	for i, c := range cmds {
		if how := e.process(c.msg, 2); how != "ack" {
			t.Fatalf("redelivery of command %d settled %q", i, how)
		}
		if got := seqs(e.eventsOf(c.acc.ID)); !slices.Equal(got, stored[c.acc.ID]) {
			t.Errorf("after redelivery command %d has events %v, want %v", i, got, stored[c.acc.ID])
		}
	}
	if got := len(e.allEvents()); got != total {
		t.Errorf("redelivery changed the event count from %d to %d", total, got)
	}
}

func TestAtomicBatchOnAggregate(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, func(a *node) { a.Handle("AddNote", tripleDecider(true)) })

	acc, msg := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "n-1"}))
	if how := e.process(msg, 1); how != "ack" {
		t.Fatalf("first delivery settled %q", how)
	}
	evs := e.eventsOf(acc.ID)
	checkEvents(t, evs, acc.ID, "", tripleTypes)
	for _, m := range evs {
		if !strings.HasPrefix(m.Subject, "agentbus.evt.default.note."+bus.ShardOf("n-1")+".") || m.Header.Get(bus.HeaderAggregateID) != "n-1" {
			t.Errorf("event on %q (aggregate %q), want the note n-1 aggregate", m.Subject, m.Header.Get(bus.HeaderAggregateID))
		}
	}
	first := seqs(evs)
	r := e.receipt(acc.ID, func(r *projection.Receipt) bool { return len(r.Events) >= 3 })
	if !slices.Equal(r.Events, first) {
		t.Errorf("receipt events %v, want %v", r.Events, first)
	}

	// Redelivered: the expectation fails (the aggregate exists now), and the
	// processor sees that this very command wrote it.
	if how := e.process(msg, 2); how != "ack" {
		t.Fatalf("redelivery settled %q", how)
	}
	if got := seqs(e.eventsOf(acc.ID)); !slices.Equal(got, first) {
		t.Errorf("after redelivery: events %v, want %v", got, first)
	}

	// Another command expecting the same new aggregate: the batch is refused
	// as a whole (none of its three events stored) and the delivery retried.
	acc2, msg2 := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "n-1"}))
	if how := e.process(msg2, 1); how != "nak" {
		t.Fatalf("conflicting command settled %q, want nak", how)
	}
	if got := e.eventsOf(acc2.ID); len(got) != 0 {
		t.Errorf("conflicting command stored %d events", len(got))
	}
	if got := len(e.allEvents()); got != 3 {
		t.Errorf("event stream holds %d events, want 3", got)
	}
}

// TestRedeliveryDoesNotDuplicate processes catalogue-rule commands twice.
func TestRedeliveryDoesNotDuplicate(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	tests := []struct {
		name  string
		raw   []byte
		event string
	}{
		{"aggregate rule", command("PlaceOrder", "place-order/1.0", map[string]any{
			"orderId": "o-redeliver", "customer": "ada", "items": []any{map[string]any{"sku": "A", "quantity": 1}}}), "OrderPlaced"},
		{"no aggregate", command("AddNote", "add-note/1.0", map[string]any{"text": "hello"}), "NoteAdded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := e.with(t)
			acc, msg := e.submit(tt.raw)
			for n := uint64(1); n <= 3; n++ {
				if how := e.process(msg, n); how != "ack" {
					t.Fatalf("delivery %d settled %q", n, how)
				}
			}
			checkEvents(t, e.eventsOf(acc.ID), acc.ID, "", []string{tt.event})
		})
	}
}

// TestRedeliveryAfterLaterEvents redelivers a command whose aggregate has
// moved on since it was processed: it must still count as done, not be
// rejected as a conflict.
func TestRedeliveryAfterLaterEvents(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	place, placeMsg := e.submit(command("PlaceOrder", "place-order/1.0", map[string]any{
		"orderId": "o-later", "customer": "ada", "items": []any{map[string]any{"sku": "A", "quantity": 1}}}))
	if how := e.process(placeMsg, 1); how != "ack" {
		t.Fatalf("PlaceOrder settled %q", how)
	}
	cancel, cancelMsg := e.submit(command("CancelOrder", "cancel-order/1.0", map[string]any{"orderId": "o-later", "reason": "r"}))
	if how := e.process(cancelMsg, 1); how != "ack" {
		t.Fatalf("CancelOrder settled %q", how)
	}
	checkEvents(t, e.eventsOf(cancel.ID), cancel.ID, "", []string{"OrderCancelled"})
	e.receipt(place.ID, func(r *projection.Receipt) bool { return r.Status == projection.StatusProcessed })

	if how := e.process(placeMsg, 2); how != "ack" {
		t.Fatalf("PlaceOrder redelivery settled %q", how)
	}
	checkEvents(t, e.eventsOf(place.ID), place.ID, "", []string{"OrderPlaced"})
}

// rejection is the data of a CommandRejected event.
type rejection struct {
	CommandID   string `json:"commandId"`
	CommandType string `json:"commandType"`
	Code        string `json:"code"`
	Message     string `json:"message"`
}

func TestProcessRejects(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, func(a *node) {
		a.Handle("AddNote", decide.DeciderFunc(func(_ context.Context, cmd decide.Command, _ decide.State) (decide.Decision, error) {
			if strings.Contains(string(cmd.Envelope.Data), "refuse") {
				return decide.Rejected(errs.CodeConflict, "refused: %s", "by the decider"), nil
			}
			return decide.Decision{Events: []decide.NewEvent{{Type: "NoteAdded", Data: cmd.Envelope.Data}}}, nil
		}))
	})
	placed, placedMsg := e.submit(command("PlaceOrder", "place-order/1.0", map[string]any{
		"orderId": "o-taken", "customer": "ada", "items": []any{map[string]any{"sku": "A", "quantity": 1}}}))
	if how := e.process(placedMsg, 1); how != "ack" {
		t.Fatalf("PlaceOrder settled %q", how)
	}
	checkEvents(t, e.eventsOf(placed.ID), placed.ID, "", []string{"OrderPlaced"})

	raw := func(mut func(map[string]any)) []byte {
		var m map[string]any
		_ = json.Unmarshal(command("PlaceOrder", "place-order/1.0", map[string]any{
			"orderId": "o-x", "customer": "ada", "items": []any{map[string]any{"sku": "A", "quantity": 1}}}), &m)
		mut(m)
		b, _ := json.Marshal(m)
		return b
	}
	// Each command has its own id; its correlation id is the one the
	// tenant, source and id derive, carried in the header as POST
	// /commands writes it (or not at all).
	withID := func(id string, mut func(map[string]any)) []byte {
		return raw(func(m map[string]any) { m["id"], m["source"] = id, "nats-client"; mut(m) })
	}
	corrOf := func(id string) string { return envelope.CorrelationID("default", "nats-client", id) }
	withCorr := func(id string) bus.Header { return bus.Header{bus.HeaderCorrelationID: {corrOf(id)}} }
	keep := func(map[string]any) {}
	tests := []struct {
		name    string
		subject string
		hdr     bus.Header
		data    []byte
		corr    string // the correlation id the rejection must carry
		typ     string
		code    errs.Code
	}{
		{"invalid envelope with correlation header", "agentbus.cmd.default.PlaceOrder", withCorr("invalid-1"),
			withID("invalid-1", func(m map[string]any) { m["time"] = "noon" }), corrOf("invalid-1"), "PlaceOrder", errs.CodeValidationFailed},
		{"invalid envelope without header", "agentbus.cmd.default.PlaceOrder", nil,
			withID("raw-1", func(m map[string]any) { m["specversion"] = "2.0" }), corrOf("raw-1"), "PlaceOrder", errs.CodeValidationFailed},
		{"a correlation header that is not the command's", "agentbus.cmd.default.PlaceOrder", withCorr("someone-else"),
			withID("forged-1", keep), corrOf("forged-1"), "PlaceOrder", errs.CodeValidationFailed},
		{"subject type differs from envelope type", "agentbus.cmd.default.CancelOrder", withCorr("mismatch-1"),
			withID("mismatch-1", keep), corrOf("mismatch-1"), "CancelOrder", errs.CodeValidationFailed},
		{"data fails its schema", "agentbus.cmd.default.PlaceOrder", withCorr("schema-1"),
			withID("schema-1", func(m map[string]any) { m["data"] = map[string]any{"orderId": "o-y"} }), corrOf("schema-1"), "PlaceOrder", errs.CodeValidationFailed},
		{"dataschema of another type", "agentbus.cmd.default.PlaceOrder", withCorr("otherschema-1"),
			withID("otherschema-1", func(m map[string]any) { m["dataschema"] = "cancel-order/1.0" }), corrOf("otherschema-1"), "PlaceOrder", errs.CodeValidationFailed},
		{"type not in the catalogue", "agentbus.cmd.default.ShipOrderNow", withCorr("unknown-1"),
			withID("unknown-1", func(m map[string]any) { m["type"] = "ShipOrderNow" }), corrOf("unknown-1"), "ShipOrderNow", errs.CodeUnknownCommandType},
		{"aggregate already exists", "agentbus.cmd.default.PlaceOrder", withCorr("exists-1"),
			withID("exists-1", func(m map[string]any) { m["data"].(map[string]any)["orderId"] = "o-taken" }), corrOf("exists-1"), "PlaceOrder", errs.CodeAggregateExists},
		{"aggregate not found", "agentbus.cmd.default.CancelOrder", withCorr("notfound-1"),
			withID("notfound-1", func(m map[string]any) {
				m["type"], m["dataschema"], m["data"] = "CancelOrder", "cancel-order/1.0", map[string]any{"orderId": "o-none", "reason": "r"}
			}), corrOf("notfound-1"), "CancelOrder", errs.CodeAggregateNotFound},
		{"decider rejects", "agentbus.cmd.default.AddNote", withCorr("decider-1"),
			withID("decider-1", func(m map[string]any) {
				m["type"], m["dataschema"], m["data"] = "AddNote", "add-note/1.0", map[string]any{"text": "please refuse"}
			}), corrOf("decider-1"), "AddNote", errs.CodeConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := e.with(t)
			m := e.publishCommand(tt.subject, tt.hdr, tt.data)
			if how := e.process(m, 1); how != "ack" {
				t.Fatalf("settled %q, want ack", how)
			}
			evs := e.eventsOf(tt.corr)
			checkEvents(t, evs, tt.corr, "", []string{decide.TypeCommandRejected})
			if evs[0].Subject != "agentbus.evt.default._._.CommandRejected" {
				t.Errorf("subject %q", evs[0].Subject)
			}
			w := decodeEvent(t, evs[0])
			if want := "http://agentbus.test/events/command-rejected/1.0"; w.env.DataSchema != want {
				t.Errorf("dataschema %q, want %q", w.env.DataSchema, want)
			}
			var rej rejection
			if err := json.Unmarshal(w.env.Data, &rej); err != nil {
				t.Fatal(err)
			}
			if rej.CommandID != tt.corr || rej.CommandType != tt.typ || rej.Code != string(tt.code) || rej.Message == "" {
				t.Errorf("rejection %+v, want commandId %s commandType %s code %s", rej, tt.corr, tt.typ, tt.code)
			}
			r := e.receipt(tt.corr, func(r *projection.Receipt) bool { return r.Status == projection.StatusRejected })
			if r.Rejection == nil || r.Rejection.Code != string(tt.code) || len(r.Events) != 1 {
				t.Errorf("receipt %+v", r)
			}
			// Redelivery adds nothing.
			if how := e.process(m, 2); how != "ack" {
				t.Fatalf("redelivery settled %q", how)
			}
			if n := len(e.eventsOf(tt.corr)); n != 1 {
				t.Errorf("after redelivery %d events", n)
			}
		})
	}
}

func TestProcessDropsUnidentifiable(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	tests := []struct {
		name, subject string
		data          []byte
		corr          string // a correlation header
	}{
		{"no correlation header, no id or source", "agentbus.cmd.default.PlaceOrder", []byte(`{"type":"PlaceOrder"}`), ""},
		{"not JSON and no header", "agentbus.cmd.default.PlaceOrder", []byte(`garbage`), ""},
		// A header alone does not say whose command this is: an outcome
		// under it could land on another command.
		{"malformed JSON with a correlation header", "agentbus.cmd.default.PlaceOrder", []byte(`{"id":`), "corr-malformed-1"},
		{"no id or source, with a correlation header", "agentbus.cmd.default.PlaceOrder", []byte(`{"oops":true}`), "corr-oops-1"},
		{"subject with an invalid tenant", "agentbus.cmd.Bad_Tenant.PlaceOrder", command("PlaceOrder", "place-order/1.0", map[string]any{}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e.with(t)
			before := len(e.allEvents())
			var hdr bus.Header
			if tt.corr != "" {
				hdr = bus.Header{bus.HeaderCorrelationID: {tt.corr}}
			}
			m := e.publishCommand(tt.subject, hdr, tt.data)
			if how := e.process(m, 1); how != "ack" {
				t.Fatalf("settled %q, want ack (nothing to retry)", how)
			}
			if after := len(e.allEvents()); after != before {
				t.Errorf("%d events appended", after-before)
			}
		})
	}
}

func TestProcessTransientFailureRetries(t *testing.T) {
	t.Parallel()
	var calls int
	var mu sync.Mutex
	e := newNatsEnv(t, func(a *node) {
		a.Handle("AddNote", decide.DeciderFunc(func(_ context.Context, cmd decide.Command, _ decide.State) (decide.Decision, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				return decide.Decision{}, errors.New("store briefly unavailable")
			}
			return decide.Decision{Events: []decide.NewEvent{{Type: "NoteAdded", Data: cmd.Envelope.Data}}}, nil
		}))
	})
	acc, msg := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "x"}))
	if how := e.process(msg, 1); how != "nak" {
		t.Fatalf("failing delivery settled %q, want nak", how)
	}
	if n := len(e.eventsOf(acc.ID)); n != 0 {
		t.Fatalf("a failed decision appended %d events", n)
	}
	if how := e.process(msg, 2); how != "ack" {
		t.Fatalf("second delivery settled %q", how)
	}
	checkEvents(t, e.eventsOf(acc.ID), acc.ID, "", []string{"NoteAdded"})
}

// TestConcurrentCommandsOnOneAggregate runs many PlaceOrder commands for
// the same new order at once: exactly one wins.
func TestConcurrentCommandsOnOneAggregate(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	const n = 20
	msgs := make([]*bus.Message, n)
	ids := make([]string, n)
	for i := range n {
		acc, m := e.submit(command("PlaceOrder", "place-order/1.0", map[string]any{
			"orderId": "o-race", "customer": fmt.Sprint("c", i), "items": []any{map[string]any{"sku": "A", "quantity": 1}}}))
		msgs[i], ids[i] = m, acc.ID
	}
	var wg sync.WaitGroup
	how := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &delivery{msg: *msgs[i], n: 1}
			e.app.ProcessCommand(context.Background(), d)
			how[i] = d.settled()
		}()
	}
	wg.Wait()
	var placed, rejected []string
	for i := range n {
		if how[i] != "ack" {
			t.Errorf("command %d settled %q", i, how[i])
		}
		evs := e.eventsOf(ids[i])
		if len(evs) != 1 {
			t.Fatalf("command %d has %d events", i, len(evs))
		}
		w := decodeEvent(t, evs[0])
		switch w.env.Type {
		case "OrderPlaced":
			placed = append(placed, ids[i])
		case decide.TypeCommandRejected:
			var rej rejection
			_ = json.Unmarshal(w.env.Data, &rej)
			if rej.Code != string(errs.CodeAggregateExists) {
				t.Errorf("command %d rejected with %s", i, rej.Code)
			}
			rejected = append(rejected, ids[i])
		}
	}
	sort.Strings(placed)
	if len(placed) != 1 || len(rejected) != n-1 {
		t.Errorf("%d placed, %d rejected; want 1 and %d", len(placed), len(rejected), n-1)
	}
}

// TestHandoffProcessesOnce runs the processor with the in-memory handoff,
// as agentbus serve does: the first delivery of a command queued here is
// processed from memory; a redelivery and a republished copy (same bytes,
// a later sequence, as an internal publisher would send it after the
// duplicate window) still count as done.
func TestHandoffProcessesOnce(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, func(a *node) { a.EnableHandoff() })
	acc, msg := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "once"}))
	e.wantHandoff(1, "handoff holds %d entries after one submission, want 1")
	if how := e.process(msg, 1); how != "ack" {
		t.Fatalf("first delivery settled %q", how)
	}
	e.wantHandoff(0, "handoff holds %d entries after the first delivery, want 0")
	checkEvents(t, e.eventsOf(acc.ID), acc.ID, "", []string{"NoteAdded"})
	e.receipt(acc.ID, func(r *projection.Receipt) bool { return len(r.Events) == 1 })

	copyHdr := bus.Header{bus.HeaderCorrelationID: {acc.ID}}
	copied := e.publishCommand(msg.Subject, copyHdr, msg.Data)
	if how := e.process(copied, 1); how != "ack" {
		t.Fatalf("republished copy settled %q", how)
	}
	if how := e.process(msg, 2); how != "ack" {
		t.Fatalf("redelivery settled %q", how)
	}
	checkEvents(t, e.eventsOf(acc.ID), acc.ID, "", []string{"NoteAdded"})
	if n := len(e.allEvents()); n != 1 {
		t.Errorf("event stream holds %d events, want 1", n)
	}
}

// TestBrokenCopyOfAProcessedCommand: a copy of a processed command, same
// source and id, published straight to NATS with its envelope broken (or
// another type on the subject), leaves the command's events and receipt as
// they are: the copy is the same command, and rejecting it would
// contradict them.
func TestBrokenCopyOfAProcessedCommand(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	acc, msg := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "original"}))
	if how := e.process(msg, 1); how != "ack" {
		t.Fatalf("original settled %q", how)
	}
	e.receipt(acc.ID, func(r *projection.Receipt) bool { return r.Status == projection.StatusProcessed && len(r.Events) == 1 })
	var env map[string]any
	if err := json.Unmarshal(msg.Data, &env); err != nil {
		t.Fatal(err)
	}
	broken, _ := json.Marshal(map[string]any{"id": env["id"], "source": env["source"], "type": "AddNote"})
	for _, c := range []struct {
		subject string
		data    []byte
	}{{msg.Subject, broken}, {"agentbus.cmd.default.ShipOrder", msg.Data}} {
		for _, hdr := range []bus.Header{nil, {bus.HeaderCorrelationID: {acc.ID}}} {
			if how := e.process(e.publishCommand(c.subject, hdr, c.data), 1); how != "ack" {
				t.Fatalf("copy on %s settled %q", c.subject, how)
			}
		}
	}
	checkEvents(t, e.eventsOf(acc.ID), acc.ID, "", []string{"NoteAdded"})
	if r := e.receipt(acc.ID, func(*projection.Receipt) bool { return true }); r.Status != projection.StatusProcessed || r.Type != "AddNote" || r.CommandSeq != msg.Seq {
		t.Errorf("receipt after the copies: %+v", r)
	}
}

// TestForgedCorrelationHeaderAcrossTenants: a command in one tenant whose
// correlation header names another tenant's command is that tenant's own
// command (rejected for the header), and leaves the named command to be
// processed as usual when it comes.
func TestForgedCorrelationHeaderAcrossTenants(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	victim, victimCorr := commandWithID("AddNote", "add-note/1.0", map[string]any{"text": "victim"})
	forged := e.publishCommand("agentbus.cmd.evil.AddNote", bus.Header{bus.HeaderCorrelationID: {victimCorr}},
		command("AddNote", "add-note/1.0", map[string]any{"text": "forged"}))
	if how := e.process(forged, 1); how != "ack" {
		t.Fatalf("forged settled %q", how)
	}
	if n := len(e.eventsOf(victimCorr)); n != 0 {
		t.Fatalf("the forged command wrote %d events under the victim's id", n)
	}
	acc, msg := e.submit(victim)
	if acc.ID != victimCorr {
		t.Fatalf("victim id %s, want %s", acc.ID, victimCorr)
	}
	if how := e.process(msg, 1); how != "ack" {
		t.Fatalf("victim settled %q", how)
	}
	checkEvents(t, e.eventsOf(victimCorr), victimCorr, "", []string{"NoteAdded"})
}

// TestHandoffCopyProcessedFirst: a command stored twice (its copy published
// past the duplicate window) whose copy was processed first, with a later
// command on the same aggregate in between. The original then comes through
// the handoff, finds the aggregate moved on, and must not be rejected: the
// copy's events stand.
func TestHandoffCopyProcessedFirst(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, func(a *node) { a.EnableHandoff() })
	place, placeMsg := e.submit(command("PlaceOrder", "place-order/1.0", map[string]any{
		"orderId": "o-copied", "customer": "ada", "items": []any{map[string]any{"sku": "A", "quantity": 1}}}))
	copied := e.publishCommand(placeMsg.Subject, bus.Header{bus.HeaderCorrelationID: {place.ID}}, placeMsg.Data)
	// Delivered as a redelivery, the copy leaves the original's handoff
	// entry in place.
	if how := e.process(copied, 2); how != "ack" {
		t.Fatalf("copy settled %q", how)
	}
	e.receipt(place.ID, func(r *projection.Receipt) bool { return r.Status == projection.StatusProcessed })
	_, cancelMsg := e.submit(command("CancelOrder", "cancel-order/1.0", map[string]any{"orderId": "o-copied", "reason": "r"}))
	if how := e.process(cancelMsg, 1); how != "ack" {
		t.Fatalf("CancelOrder settled %q", how)
	}
	e.wantHandoff(1, "handoff holds %d entries, want the original's")
	if how := e.process(placeMsg, 1); how != "ack" {
		t.Fatalf("original settled %q", how)
	}
	e.wantHandoff(0, "the original did not come through the handoff (%d entries left)")
	checkEvents(t, e.eventsOf(place.ID), place.ID, "", []string{"OrderPlaced"})
}

// TestHandoffRejectionAfterCopy: like TestHandoffCopyProcessedFirst, but
// the decider rejects on its first decision of the original (no conflict,
// attempt 0), and the copy was decided by another replica, so nothing in
// this process marked the original's handoff entry: the receipt check
// before rejecting must still run for a command that came through the
// handoff.
func TestHandoffRejectionAfterCopy(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	deciders := func(a *node) {
		a.Handle("AddNote", decide.DeciderFunc(func(_ context.Context, cmd decide.Command, _ decide.State) (decide.Decision, error) {
			if calls.Add(1) > 1 {
				return decide.Rejected(errs.CodeValidationFailed, "decided once already"), nil
			}
			return decide.Decision{Events: []decide.NewEvent{{Type: "NoteAdded", Data: cmd.Envelope.Data}}}, nil
		}))
	}
	e := newNatsEnv(t, func(a *node) { a.EnableHandoff(); deciders(a) })
	acc, msg := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "copied"}))
	copied := e.publishCommand(msg.Subject, bus.Header{bus.HeaderCorrelationID: {acc.ID}}, msg.Data)
	if how := e.processOn(e.replica(deciders), copied, 2); how != "ack" {
		t.Fatalf("copy settled %q", how)
	}
	e.receipt(acc.ID, func(r *projection.Receipt) bool { return r.Status == projection.StatusProcessed })
	if how := e.process(msg, 1); how != "ack" {
		t.Fatalf("original settled %q", how)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("decider called %d times, want 2 (the original decided through the handoff)", n)
	}
	checkEvents(t, e.eventsOf(acc.ID), acc.ID, "", []string{"NoteAdded"})
}

// wantHandoff fails the test unless the handoff holds n entries; what says
// what a different count means, with a %d for the count.
func (e *natsEnv) wantHandoff(n int, what string) {
	e.t.Helper()
	if got := e.app.handoff.Len(); got != n {
		e.t.Fatalf(what, got)
	}
}

// TestOversizedOutcomes: what cannot be stored however often it is tried
// ends at once: events larger than the store takes reject their command
// (PAYLOAD_TOO_LARGE), and a rejection whose message would make its
// receipt too large is kept in the receipt cut short.
func TestOversizedOutcomes(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, func(a *node) {
		a.Handle("AddNote", decide.DeciderFunc(func(_ context.Context, cmd decide.Command, _ decide.State) (decide.Decision, error) {
			huge, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 9<<20)})
			return decide.Decision{Events: []decide.NewEvent{{Type: "NoteAdded", Data: huge}}}, nil
		}))
	})
	acc, msg := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "grows"}))
	if how := e.process(msg, 1); how != "ack" {
		t.Fatalf("settled %q, want ack at the first delivery", how)
	}
	evs := e.eventsOf(acc.ID)
	checkEvents(t, evs, acc.ID, "", []string{decide.TypeCommandRejected})
	var rej rejection
	if err := json.Unmarshal(decodeEvent(t, evs[0]).env.Data, &rej); err != nil || rej.Code != string(errs.CodePayloadTooLarge) {
		t.Fatalf("rejection %+v, %v", rej, err)
	}

	// A rejection published on NATS with a message that JSON-escapes to
	// more than the maximum payload (each "<" is six bytes in a receipt).
	corr := envelope.CorrelationID(tenant, "nats-client", "huge-rejection")
	raw := `{"data":{"commandId":"` + corr + `","commandType":"AddNote","code":"SOME_CODE","message":"` + strings.Repeat("<", 1_500_000) + `"}}`
	if _, err := e.events.Append(e.ctx(), []*bus.Message{{Subject: "agentbus.evt.default._._.CommandRejected",
		Header: bus.Header{bus.HeaderCorrelationID: {corr}}, Data: []byte(raw)}}, nil); err != nil {
		t.Fatal(err)
	}
	r := e.receipt(corr, func(r *projection.Receipt) bool { return r.Status == projection.StatusRejected })
	if r.Rejection == nil || r.Rejection.Code != "SOME_CODE" || len(r.Rejection.Message) == 0 || len(r.Rejection.Message) > 2048 {
		t.Errorf("receipt rejection: code %v, message of %d bytes", r.Rejection.Code, len(r.Rejection.Message))
	}
}

// TestSquattedMessageID: a message another publisher stored under a
// command's message id (its correlation id) is not that command: POST
// /commands answers CONFLICT instead of a 202 for a command it did not
// queue, while a true resubmission still answers 202.
func TestSquattedMessageID(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	victim, corr := commandWithID("AddNote", "add-note/1.0", map[string]any{"text": "victim"})
	e.publishCommand("agentbus.cmd.default.AddNote", bus.Header{bus.HeaderMsgID: {corr}},
		command("AddNote", "add-note/1.0", map[string]any{"text": "squatter"}))
	_, err := e.app.SubmitCommand(e.ctx(), tenant, victim)
	if got := errs.As(err); err == nil || got.Code != errs.CodeConflict {
		t.Fatalf("submit under a squatted id: %v, want CONFLICT", err)
	}
	acc, _ := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "fine"}))
	var raw []byte
	if m, err := e.cmds.Get(e.ctx(), acc.Seq); err == nil {
		raw = m.Data
	}
	again, err := e.app.SubmitCommand(e.ctx(), tenant, raw)
	if err != nil || again.ID != acc.ID {
		t.Fatalf("resubmission: %+v, %v", again, err)
	}
}

// TestRedeliveryWaitsForReceipts: a command redelivered after its events
// were stored (the ack lost in a crash) is checked against its receipt only
// once the receipts consumer has projected the events stored before: here
// that consumer is paused, as one is that has not caught up after a
// restart, and the duplicate window cannot help (the second decision would
// write another event, under another id).
func TestRedeliveryWaitsForReceipts(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	e := newNatsEnv(t, func(a *node) { a.Handle("AddNote", decidesOtherwiseLater(&calls)) })
	acc, msg := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "once"}))
	resume := e.pauseHistory()
	// Decided by another process (this one would remember it), which
	// crashed before its ack.
	if how := e.processOn(e.replica(func(a *node) { a.Handle("AddNote", decidesOtherwiseLater(&calls)) }), msg, 1); how != "ack" {
		t.Fatalf("first delivery settled %q", how)
	}
	resumed := resume(300 * time.Millisecond)
	if how := e.process(msg, 2); how != "ack" {
		t.Fatalf("redelivery settled %q", how)
	}
	if err := <-resumed; err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("decided %d times, want once", n)
	}
	checkEvents(t, e.eventsOf(acc.ID), acc.ID, "", []string{"NoteAdded"})
}

// TestHandoffCheckedAfterAStall: a handoff entry taken long after it was
// offered (processing stalled meanwhile) is checked against its receipt
// before it is decided: a copy of the command may have been decided in the
// meantime, by another replica.
func TestHandoffCheckedAfterAStall(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	deciders := func(a *node) { a.Handle("AddNote", decidesOtherwiseLater(&calls)) }
	e := newNatsEnv(t, func(a *node) { a.EnableHandoff(); deciders(a) })
	acc, msg := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "stalled"}))
	copied := e.publishCommand(msg.Subject, bus.Header{bus.HeaderCorrelationID: {acc.ID}}, msg.Data)
	// The copy's receipt lags too: the check waits for it.
	resume := e.pauseHistory()
	if how := e.processOn(e.replica(deciders), copied, 1); how != "ack" {
		t.Fatalf("copy settled %q", how)
	}
	time.Sleep(envDuplicateWindow + 100*time.Millisecond) // past the window the App was told
	resumed := resume(300 * time.Millisecond)
	if how := e.process(msg, 1); how != "ack" {
		t.Fatalf("original settled %q", how)
	}
	if err := <-resumed; err != nil {
		t.Fatal(err)
	}
	e.wantHandoff(0, "the original did not come through the handoff (%d entries left)")
	if n := calls.Load(); n != 1 {
		t.Errorf("decided %d times, want once", n)
	}
	checkEvents(t, e.eventsOf(acc.ID), acc.ID, "", []string{"NoteAdded"})
}

// decidesOtherwiseLater counts its decisions in calls and writes NoteAdded
// the first time, NoteAmended after: a second decision of one command is
// a second event under another id, which the duplicate window cannot stop.
func decidesOtherwiseLater(calls *atomic.Int64) decide.Decider {
	return decide.DeciderFunc(func(_ context.Context, cmd decide.Command, _ decide.State) (decide.Decision, error) {
		typ := "NoteAdded"
		if calls.Add(1) > 1 {
			typ = "NoteAmended"
		}
		return decide.Decision{Events: []decide.NewEvent{{Type: typ, Data: cmd.Envelope.Data}}}, nil
	})
}

// commandWithID is command's envelope and the correlation id POST
// /commands gives it in the default tenant.
func commandWithID(typ, schema string, data any) ([]byte, string) {
	raw := command(typ, schema, data)
	var env struct{ ID, Source string }
	_ = json.Unmarshal(raw, &env)
	return raw, envelope.CorrelationID(tenant, env.Source, env.ID)
}

// TestCopiesBackToBack: two stored copies of one command (the second
// stored past the duplicate window), both first deliveries, decided one
// right after the other while the history of receipts is behind: the second
// changes nothing, whether it is the same or broken.
func TestCopiesBackToBack(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	e := newNatsEnv(t, func(a *node) { a.Handle("AddNote", decidesOtherwiseLater(&calls)) })
	raw, corr := commandWithID("AddNote", "add-note/1.0", map[string]any{"text": "twice"})
	resume := e.pauseHistory()
	first := e.publishCommand("agentbus.cmd.default.AddNote", nil, raw)
	if how := e.process(first, 1); how != "ack" {
		t.Fatalf("first copy settled %q", how)
	}
	same := e.publishCommand("agentbus.cmd.default.AddNote", nil, raw)
	broken := e.publishCommand("agentbus.cmd.default.ShipOrder", nil, raw) // another type on the subject
	for _, m := range []*bus.Message{same, broken} {
		if how := e.process(m, 1); how != "ack" {
			t.Fatalf("copy %d settled %q", m.Seq, how)
		}
	}
	if err := <-resume(0); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("decided %d times, want once", n)
	}
	checkEvents(t, e.eventsOf(corr), corr, "", []string{"NoteAdded"})
}

// pauseHistory pauses the app's history of receipts on the event log, as
// one that has not caught up; the returned func resumes it after a delay,
// in the background, and reports when it did.
func (e *natsEnv) pauseHistory() func(after time.Duration) <-chan error {
	e.t.Helper()
	resume := e.app.history.pause()
	return func(after time.Duration) <-chan error {
		done := make(chan error, 1)
		go func() {
			time.Sleep(after)
			resume()
			done <- nil
		}()
		return done
	}
}

// TestCommandReceiptOverridesEventHeader: an event projected before its
// command, whose Agentbus-Command-Seq header (an external processor's, say)
// names another sequence, does not keep the command log's own message from
// its receipt, and a second copy of the command does not replace it.
func TestCommandReceiptOverridesEventHeader(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	raw, corr := commandWithID("AddNote", "add-note/1.0", map[string]any{"text": "event first"})
	ev := &bus.Message{Subject: "agentbus.evt." + tenant + "._._.NoteAdded",
		Header: bus.Header{bus.HeaderCorrelationID: {corr}, bus.HeaderCommandSeq: {"999999"}}, Data: []byte(`{"type":"NoteAdded"}`)}
	if _, err := e.events.Append(e.ctx(), []*bus.Message{ev}, nil); err != nil {
		t.Fatal(err)
	}
	e.receipt(corr, func(r *projection.Receipt) bool { return r.CommandSeq == 999999 })
	m := e.publishCommand("agentbus.cmd."+tenant+".AddNote", nil, raw)
	r := e.receipt(corr, func(r *projection.Receipt) bool { return r.CommandID != "" })
	if r.CommandSeq != m.Seq || r.Type != "AddNote" || len(r.Events) != 1 {
		t.Errorf("receipt %+v, want command %d of type AddNote and its event", r, m.Seq)
	}
	copied := e.publishCommand("agentbus.cmd."+tenant+".AddNote", nil, raw)
	if err := e.app.receipts.CommandsCurrent(e.ctx()); err != nil {
		t.Fatal(err)
	}
	if r := e.receipt(corr, func(*projection.Receipt) bool { return true }); r.CommandSeq != m.Seq {
		t.Errorf("a copy (%d) replaced the command (%d): %+v", copied.Seq, m.Seq, r)
	}
}

// TestAnAggregateIDThatIsNotOneIsRejected: a decider that names an
// aggregate by something that is not an id gets its command rejected
// (INTERNAL_ERROR), not events that would belong to no aggregate.
func TestAnAggregateIDThatIsNotOneIsRejected(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, func(a *node) { a.Handle("AddNote", tripleDecider(true)) })
	acc, msg := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "not an id"}))
	if how := e.process(msg, 1); how != "ack" {
		t.Fatalf("delivery settled %q", how)
	}
	evs := e.eventsOf(acc.ID)
	checkEvents(t, evs, acc.ID, "", []string{"CommandRejected"})
	if len(evs) == 1 && !strings.Contains(string(evs[0].Data), `"code":"INTERNAL_ERROR"`) {
		t.Errorf("rejection %s, want INTERNAL_ERROR", evs[0].Data)
	}
}

// sameShardOrders returns n order ids whose events share one shard's
// subjects.
func sameShardOrders(n int) []string {
	subj := bus.Subjects{Prefix: "agentbus"}
	var ids []string
	shard := subj.Aggregate(tenant, "order", "o-shard-0")
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprint("o-shard-", i)
		if subj.Aggregate(tenant, "order", id) == shard {
			ids = append(ids, id)
		}
	}
	return ids
}

// placeOn submits a PlaceOrder for id and has on process it; every order
// is placed.
func (e *natsEnv) placeOn(on *node, id string) {
	e.t.Helper()
	acc, m := e.submit(command("PlaceOrder", "place-order/1.0", map[string]any{
		"orderId": id, "customer": "ada", "items": []any{map[string]any{"sku": "A", "quantity": 1}}}))
	if how := e.processOn(on, m, 1); how != "ack" {
		e.t.Fatalf("order %s settled %q", id, how)
	}
	checkEvents(e.t, e.eventsOf(acc.ID), acc.ID, "", []string{"OrderPlaced"})
}

// TestReplicasTakeTurnsOnAShard: two replicas place new orders of one
// shard in turn, each once its aggregate index holds the other's last
// append: no append is refused, since each learns of the other's appends
// from its index (ShardLast) rather than when the server refuses one.
func TestReplicasTakeTurnsOnAShard(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	other := e.replica(nil)
	for i, id := range sameShardOrders(8) {
		on := e.app
		if i%2 == 1 {
			on = other
		}
		last, err := projection.LastStored(e.ctx(), e.events)
		if err != nil {
			t.Fatal(err)
		}
		if err := on.aggs.WaitApplied(e.ctx(), last); err != nil {
			t.Fatal(err)
		}
		e.placeOn(on, id)
	}
	if c := e.app.observed.conflicts.Load() + other.observed.conflicts.Load(); c != 0 {
		t.Errorf("%d conflicts; each replica's index held the other's appends before it appended", c)
	}
}

// TestReplicasConflictOnAShard: a replica whose aggregate index has not
// yet taken in the other replica's append to a shard expects the shard's
// last event it knew of: the append is refused, the command decided again
// on the new state once the index holds it, and stored, and the processor
// reports the conflict (agentbus_command_conflicts_total). Every order is
// placed once.
func TestReplicasConflictOnAShard(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	other := e.replica(nil)
	ids := sameShardOrders(3)
	e.placeOn(e.app, ids[0])
	resume := e.app.aggsTail.pause()
	defer resume()
	e.placeOn(other, ids[1])
	go func() { // the index takes in the other's append once the conflict is seen
		defer resume()
		for e.app.observed.conflicts.Load() == 0 {
			select {
			case <-t.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	e.placeOn(e.app, ids[2])
	if c := e.app.observed.conflicts.Load(); c == 0 {
		t.Error("no conflict reported; the replica's append expected a shard's last event the other had moved past")
	}
}
