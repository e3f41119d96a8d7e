package crash_test

// Crash tests of the control plane: agentbus is killed with SIGKILL between
// accepting an agent registration and answering it, at several points (the
// command just stored; the AgentRegistered event just stored, before the
// agent's consumer exists and before the registry answered). After a restart
// on the same data the registration must be complete (event, registry record
// and consumer) or absent (none of them), never half-done, and a retry
// converges on exactly one registration.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// registerBaseline is how many RegisterAgent commands were stored before
// the current case.
var registerBaseline int

// regState is what agentbus and NATS say of one agent id.
type regState struct {
	stored     int  // RegisterAgent commands for it in the command log
	registered int  // AgentRegistered events for it in the event log
	getStatus  int  // GET /agents/{id}
	consumer   bool // its durable consumer exists
}

func (s regState) complete() bool {
	return s.registered == 1 && s.getStatus == 200 && s.consumer
}

func (s regState) absent() bool {
	return s.registered == 0 && s.getStatus == 404 && !s.consumer
}

func readState(t *testing.T, js jetstream.JetStream, base, id string) regState {
	t.Helper()
	var st regState
	count := func(stream, subject string) int { return int(testkit.SubjectMsgs(t, js, stream, subject)) }
	st.registered = count("AGENTBUS_EVENTS", "agentbus.evt.default.agent."+id+".AgentRegistered")
	// Only this test submits RegisterAgent commands, one agent id at a
	// time: those stored since the case began are this id's.
	st.stored = count("AGENTBUS_COMMANDS", "agentbus.cmd.default.RegisterAgent") - registerBaseline
	res, err := client.Get(base + "/agents/" + id)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	st.getStatus = res.StatusCode
	st.consumer = testkit.ConsumerInfo(t, js, "AGENTBUS_COMMANDS", "agent_default_"+id) != nil
	return st
}

// settle waits until the state of id is complete, or absent with nothing
// stored that could still complete it.
func settle(t *testing.T, js jetstream.JetStream, base, id string) regState {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := readState(t, js, base, id)
		if st.complete() || (st.absent() && st.stored == 0) {
			return st
		}
		if time.Now().After(deadline) || st.registered > 1 {
			dumpAgent(t, js, id)
			t.Fatalf("agent %s half-done 30s after restart: %+v", id, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func postBody(base, path string, body []byte) (int, []byte, error) {
	res, err := client.Post(base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

func TestKillNineDuringRegistration(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "agentbus.yaml")
	if err := os.WriteFile(cfgFile, []byte(`{"catalog":{"dirs":["../../config/catalog","../../cmd/example-agent/catalog"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newTarget(t, "--config", cfgFile)
	base, natsAddr := g.base, g.natsAddr
	p := g.start(t, 1)

	cases := []struct {
		name string
		// via: "rest" posts /agents; "commands" posts the RegisterAgent
		// envelope to /commands.
		via string
		// killOn is the subject whose first message triggers SIGKILL.
		killOn string
	}{
		{"rest, command stored", "rest", "agentbus.cmd.default.RegisterAgent"},
		{"rest, event stored", "rest", "agentbus.evt.default.agent.*.AgentRegistered"},
		{"commands, command stored", "commands", "agentbus.cmd.default.RegisterAgent"},
		{"commands, event stored", "commands", "agentbus.evt.default.agent.*.AgentRegistered"},
	}
	for i, c := range cases {
		id := fmt.Sprintf("crash-agent-%d", i)
		body, _ := json.Marshal(map[string]any{"id": id, "name": "Crash " + c.name, "accepts": []string{"ChargeCustomer"}})
		env, _ := json.Marshal(map[string]any{
			"specversion": "1.0", "id": "crash-register-" + id, "source": "crash-test", "type": "RegisterAgent",
			"datacontenttype": "application/json", "dataschema": "register-agent/1.0",
			"time": time.Now().UTC().Format(time.RFC3339), "data": json.RawMessage(body),
		})
		path, payload := "/agents", body
		if c.via == "commands" {
			path, payload = "/commands", env
		}

		js0 := testkit.JetStream(t, "nats://"+natsAddr, nats.NoReconnect())
		nc := js0.Conn()
		registerBaseline = 0
		registerBaseline = readState(t, js0, base, id).stored
		killed := make(chan struct{})
		sub, err := nc.Subscribe(c.killOn, func(*nats.Msg) {
			select {
			case <-killed:
			default:
				_ = p.Kill()
				close(killed)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		status, answer, err := postBody(base, path, payload)
		select {
		case <-killed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: never saw %s (answer %d %s %v)", c.name, c.killOn, status, answer, err)
		}
		_ = p.Wait()
		_ = sub.Unsubscribe()
		nc.Close()
		client.Transport.(*http.Transport).CloseIdleConnections()
		t.Logf("%s: SIGKILL; the caller got %d %s (err %v)", c.name, status, bytes.TrimSpace(answer), err)

		p = g.start(t, i+2)
		js := testkit.JetStream(t, "nats://"+natsAddr)
		st := settle(t, js, base, id)
		t.Logf("%s: after restart %+v", c.name, st)

		// The retry converges on one complete registration.
		status, answer, err = postBody(base, path, payload)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.via == "commands" && status == 202:
			var r struct{ ID string }
			_ = json.Unmarshal(answer, &r)
			// The same envelope gets the same correlation id: nothing new.
			if want := envelope.CorrelationID("default", "crash-test", "crash-register-"+id); r.ID != want {
				t.Fatalf("%s: retry id %s, want %s", c.name, r.ID, want)
			}
		case c.via == "rest" && st.complete() && status == 409:
		case c.via == "rest" && st.absent() && status == 201:
		default:
			t.Fatalf("%s: retry from state %+v answered %d %s", c.name, st, status, answer)
		}
		final := settle(t, js, base, id)
		if !final.complete() {
			t.Fatalf("%s: after the retry %+v", c.name, final)
		}
		// Nothing is left to register the agent a second time once the
		// pipeline and the agent reconciliation are idle.
		testkit.WaitIdle(t, js, testkit.PipelineConsumers("AGENTBUS_EVENTS/control")...)
		if again := readState(t, js, base, id); again.registered != 1 || !again.complete() {
			t.Fatalf("%s: %+v", c.name, again)
		}
		js.Conn().Close()
	}
}

func dumpAgent(t *testing.T, js jetstream.JetStream, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, f := range []string{"agentbus.evt.default.agent." + id + ".*", "agentbus.evt.default._._.*", "agentbus.cmd.default.RegisterAgent"} {
		stream := "AGENTBUS_EVENTS"
		if f[9:12] == "cmd" {
			stream = "AGENTBUS_COMMANDS"
		}
		cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{f}})
		if err != nil {
			t.Fatal(err)
		}
		batch, _ := cons.FetchNoWait(100)
		for m := range batch.Messages() {
			md, _ := m.Metadata()
			t.Logf("%s seq=%d %v %s", m.Subject(), md.Sequence.Stream, m.Headers(), m.Data())
		}
	}
}
