package bus_test

import (
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
)

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		subject, filter string
		want            bool
	}{
		{"p.evt.t.a.1.X", "p.evt.t.>", true},
		{"p.evt.t.a.1.X", "p.evt.t.*.*.X", true},
		{"p.evt.t.a.1.Y", "p.evt.t.*.*.X", false},
		{"p.evt.u.a.1.X", "p.evt.t.>", false},
		{"p.evt.t", "p.evt.t.>", false},
		{"p.evt.t.a.1.X.more", "p.evt.t.*.*.X", false},
		{"p.evt.t.a.1", "p.evt.t.*.*.X", false},
		{"p.evt.t.a.1.X.more", "p.evt.t.>", true},
		{"p.evt.tt.a.1.X", "p.evt.t.>", false},
		{"p.evt.t.a.1.X", ">", true},
		{"p.evt.t.a.1.X", "p.evt.*.a.*.*", true},
		{"p.evt.t.b.1.X", "p.evt.*.a.*.*", false},
	} {
		if got := bus.SubjectMatches(c.subject, c.filter); got != c.want {
			t.Errorf("%s against %s: %v, want %v", c.subject, c.filter, got, c.want)
		}
	}
}

// TestEvent: an event's subject, header and envelope are read as each
// listener read them for itself: ParseEvent, the correlation header, the
// envelope's id and type, JSONObject.
func TestEvent(t *testing.T) {
	subj := bus.Subjects{Prefix: "p"}
	for _, c := range []struct {
		subject, data string
		parsed        bool
		id, typ       string
		object        bool
	}{
		{"p.evt.t.order.o-1.OrderPlaced", `{"id":"e1","type":"OrderPlaced","data":{}}`, true, "e1", "OrderPlaced", true},
		{"p.evt.t.order.o-1.OrderPlaced", ` {"id":5,"type":"X"}`, true, "", "X", true},
		{"p.evt.t.order.o-1.OrderPlaced", `[1]`, true, "", "", false},
		{"p.evt.t.order.o-1.OrderPlaced", `{"id":"e1"`, true, "", "", false},
		{"p.evt.t.order.o-1.OrderPlaced", `null`, true, "", "", false},
		{"p.evt.t.order", `{}`, false, "", "", true},
		{"p.evt.bad tenant.order.o-1.X", `{}`, false, "", "", true},
	} {
		m := &bus.Message{Subject: c.subject, Data: []byte(c.data), Header: bus.Header{bus.HeaderCorrelationID: {"c-1"}}}
		ev := bus.NewEvent(subj, m)
		tenant, agg, id, typ, ok := subj.ParseEvent(c.subject)
		if ev.Parsed != c.parsed || ev.Parsed != ok || ev.Tenant != tenant || ev.AggType != agg || ev.AggID != id || ev.Type != typ {
			t.Errorf("%s: parsed %v %q %q %q %q, want %v", c.subject, ev.Parsed, ev.Tenant, ev.AggType, ev.AggID, ev.Type, c.parsed)
		}
		if ev.CorrelationID != "c-1" {
			t.Errorf("%s: correlation id %q", c.subject, ev.CorrelationID)
		}
		var wg sync.WaitGroup
		for range 4 { // decoded once, whoever asks first
			wg.Go(func() {
				gotID, gotType, object := ev.Envelope()
				if gotID != c.id || gotType != c.typ || object != c.object || object != bus.JSONObject(m.Data) {
					t.Errorf("%s: envelope %q %q %v, want %q %q %v", c.data, gotID, gotType, object, c.id, c.typ, c.object)
				}
			})
		}
		wg.Wait()
	}
}
