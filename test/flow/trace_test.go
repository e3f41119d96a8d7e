package flow_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/query"
)

// TestTraceCommandIsTheTracedOne: the command sequence of a receipt built
// from events comes from their headers, which any publisher writes; a trace
// shows the command at that sequence only when it is the traced command.
func TestTraceCommandIsTheTracedOne(t *testing.T) {
	t.Parallel()
	e := newNatsEnv(t, nil)
	acc, msg := e.submit(command("AddNote", "add-note/1.0", map[string]any{"text": "mine"}))
	seq := strconv.FormatUint(msg.Seq, 10)
	for _, c := range []struct{ tenant, corr string }{
		{"evil", "evil-probe-1"},  // another tenant's event
		{"default", "probe-2"},    // this tenant, another command
		{"default", acc.ID + "x"}, // close, but not it
	} {
		e.publishEvent("agentbus.evt."+c.tenant+"._._.Whatever",
			bus.Header{bus.HeaderCorrelationID: {c.corr}, bus.HeaderCommandSeq: {seq}}, map[string]any{})
		var tr *query.Trace
		deadline := time.Now().Add(5 * time.Second)
		for {
			var err error
			if tr, err = e.app.GetTrace(e.ctx(), c.tenant, c.corr); err == nil && len(tr.Events) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s/%s: no trace with its event: %+v %v", c.tenant, c.corr, tr, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if tr.Command.ID != "" || tr.Command.Source != "" || tr.Command.Time != "" {
			t.Errorf("%s/%s: trace shows command %+v, which is not its own", c.tenant, c.corr, tr.Command)
		}
	}
}
