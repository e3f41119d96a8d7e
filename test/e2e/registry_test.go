package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestAgentLifecycle(t *testing.T) {
	t.Parallel()
	s, js := startOnNATS(t)
	base := s.URL

	r := postJSON(t, base+"/agents", map[string]any{"id": "billing", "name": "Billing", "description": "charges",
		"accepts": []string{"ChargeCustomer"}, "produces": []string{"CustomerCharged"}})
	auExpect(t, "register", r, 201, "")
	if loc := r.Header.Get("Location"); !strings.HasSuffix(loc, "/agents/billing") {
		t.Fatalf("Location %q", loc)
	}
	var ag map[string]any
	_ = json.Unmarshal(r.Body, &ag)
	regTimestamp(t, "agent", ag, "createdAt")
	regTimestamp(t, "agent", ag, "updatedAt")
	if ag["id"] != "billing" || ag["status"] != "active" || ag["updatedAt"] != ag["createdAt"] ||
		fmt.Sprint(ag["accepts"]) != "[ChargeCustomer]" || fmt.Sprint(ag["produces"]) != "[CustomerCharged]" || ag["description"] != "charges" {
		t.Fatalf("record: %s", r.Body)
	}
	// The consumer exists as soon as the registration answered.
	ci := regConsumer(t, js, "agent_default_billing")
	if ci == nil || ci.Config.FilterSubject != "agentbus.cmd.default.ChargeCustomer" || ci.Paused {
		t.Fatalf("consumer after register: %+v", ci)
	}

	auExpect(t, "register again", postJSON(t, base+"/agents", map[string]any{"id": "billing", "name": "Other"}), 409, "AGENT_ALREADY_REGISTERED")
	g := get(t, base+"/agents/billing")
	auExpect(t, "get", g, 200, "")
	// The record, as the 201 gave it, and what is pending for the agent.
	want := bytes.TrimSuffix(bytes.TrimSpace(r.Body), []byte("}"))
	if wantBody := string(want) + `,"pending":{"commands":0,"inFlight":0}}`; string(bytes.TrimSpace(g.Body)) != wantBody {
		t.Fatalf("get differs from the 201 body with pending:\n%s\n%s", g.Body, wantBody)
	}

	auExpect(t, "pause", do(t, "POST", base+"/agents/billing/pause", "", nil), 204, "")
	if ci := regConsumer(t, js, "agent_default_billing"); ci == nil || !ci.Paused {
		t.Fatalf("consumer not paused after 204: %+v", ci)
	}
	if a := get(t, base+"/agents/billing").JSON(t); a["status"] != "paused" || a["updatedAt"] == a["createdAt"] {
		t.Fatalf("after pause: %v", a)
	}
	auExpect(t, "pause paused", do(t, "POST", base+"/agents/billing/pause", "", nil), 409, "AGENT_ALREADY_PAUSED")
	auExpect(t, "resume", do(t, "POST", base+"/agents/billing/resume", "", nil), 204, "")
	if ci := regConsumer(t, js, "agent_default_billing"); ci == nil || ci.Paused {
		t.Fatalf("consumer paused after resume: %+v", ci)
	}
	auExpect(t, "resume active", do(t, "POST", base+"/agents/billing/resume", "", nil), 409, "AGENT_NOT_PAUSED")
	if a := get(t, base+"/agents/billing").JSON(t); a["status"] != "active" {
		t.Fatalf("after resume: %v", a)
	}

	auExpect(t, "delete", do(t, "DELETE", base+"/agents/billing", "", nil), 204, "")
	if ci := regConsumer(t, js, "agent_default_billing"); ci != nil {
		t.Fatalf("consumer left after delete: %+v", ci.Name)
	}
	auExpect(t, "get deleted", get(t, base+"/agents/billing"), 404, "AGENT_NOT_FOUND")
	auExpect(t, "pause deleted", do(t, "POST", base+"/agents/billing/pause", "", nil), 404, "AGENT_NOT_FOUND")
	auExpect(t, "resume deleted", do(t, "POST", base+"/agents/billing/resume", "", nil), 404, "AGENT_NOT_FOUND")
	auExpect(t, "delete deleted", do(t, "DELETE", base+"/agents/billing", "", nil), 404, "AGENT_NOT_FOUND")
	auExpect(t, "pause unknown", do(t, "POST", base+"/agents/nobody/pause", "", nil), 404, "AGENT_NOT_FOUND")
	if l := get(t, base+"/agents").JSON(t); len(l["agents"].([]any)) != 0 {
		t.Fatalf("list after delete: %v", l)
	}

	// A deleted id can be registered again, with a fresh consumer.
	auExpect(t, "re-register", postJSON(t, base+"/agents", map[string]any{"id": "billing", "name": "Billing 2",
		"accepts": []string{"ChargeCustomer"}}), 201, "")
	if a := get(t, base+"/agents/billing").JSON(t); a["name"] != "Billing 2" || a["status"] != "active" {
		t.Fatalf("after re-register: %v", a)
	}
	if ci := regConsumer(t, js, "agent_default_billing"); ci == nil {
		t.Fatal("no consumer after re-register")
	}

	// A generated id; an agent accepting nothing has no consumer.
	r = postJSON(t, base+"/agents", map[string]any{"name": "Watcher", "produces": []string{"Noticed"}})
	auExpect(t, "register without id", r, 201, "")
	id, _ := r.JSON(t)["id"].(string)
	if len(id) != 36 {
		t.Fatalf("generated id %q", id)
	}
	auExpect(t, "get generated", get(t, base+"/agents/"+id), 200, "")
	if ci := regConsumer(t, js, "agent_default_"+id); ci != nil {
		t.Fatal("an agent accepting nothing got a consumer")
	}
	auExpect(t, "pause generated", do(t, "POST", base+"/agents/"+id+"/pause", "", nil), 204, "")
}

func TestRegistryValidation(t *testing.T) {
	t.Parallel()
	s := start(t, regCatalogs)
	base := s.URL
	cases := []struct {
		name   string
		path   string
		body   string
		status int
		code   string
		paths  []string
	}{
		{"unknown field", "/agents", `{"name":"a","colour":"red"}`, 400, "VALIDATION_FAILED", []string{"$.colour"}},
		{"no name", "/agents", `{"id":"a"}`, 400, "VALIDATION_FAILED", []string{"$.name"}},
		{"bad id", "/agents", `{"id":"a b","name":"a"}`, 400, "VALIDATION_FAILED", []string{"$.id"}},
		{"bad type", "/agents", `{"name":"a","accepts":["chargeCustomer"],"produces":["Ok","bad-type"]}`, 400, "VALIDATION_FAILED", []string{"$.accepts.0", "$.produces.1"}},
		{"duplicate key", "/agents", `{"name":"a","name":"b"}`, 400, "VALIDATION_FAILED", []string{"$.name"}},
		{"not an object", "/agents", `["a"]`, 400, "VALIDATION_FAILED", []string{"$"}},
		{"malformed", "/agents", `{"name":`, 400, "MALFORMED_JSON", nil},
		{"service unknown field", "/services", `{"name":"s","status":"active"}`, 400, "VALIDATION_FAILED", []string{"$.status"}},
		{"service duplicate accepts", "/services", `{"name":"s","accepts":["A","A"]}`, 400, "VALIDATION_FAILED", []string{"$.accepts"}},
		// PlaceOrder has a catalogue rule: agentbus processes it, an agent cannot.
		{"accepts a processed type", "/agents", `{"name":"a","accepts":["PlaceOrder"]}`, 400, "VALIDATION_FAILED", nil},
		{"accepts a control command", "/agents", `{"name":"a","accepts":["RegisterAgent"]}`, 400, "VALIDATION_FAILED", nil},
		{"control character in a name", "/agents", `{"name":"A\u0000B"}`, 400, "VALIDATION_FAILED", []string{"$.name"}},
		{"line break in a name", "/services", `{"name":"A\nB"}`, 400, "VALIDATION_FAILED", []string{"$.name"}},
		{"escape character in a description", "/services", `{"name":"s","description":"a\u001b[31mb"}`, 400, "VALIDATION_FAILED", []string{"$.description"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, "POST", base+c.path, "application/json", []byte(c.body))
			auExpect(t, c.name, r, c.status, c.code)
			for _, p := range c.paths {
				if !strings.Contains(string(r.Body), `"path":"`+p+`"`) {
					t.Errorf("no violation at %s: %s", p, r.Body)
				}
			}
		})
	}
	auExpect(t, "bad path id", do(t, "POST", base+"/agents/a.b/pause", "", nil), 400, "VALIDATION_FAILED")
	auExpect(t, "bad get id", get(t, base+"/services/a%20b"), 400, "VALIDATION_FAILED")
	auExpect(t, "unknown query", get(t, base+"/agents?colour=red"), 400, "VALIDATION_FAILED")
	auExpect(t, "bad limit", get(t, base+"/agents?limit=0"), 400, "VALIDATION_FAILED")
	auExpect(t, "bad after", get(t, base+"/services?after=a.b"), 400, "VALIDATION_FAILED")
	if l := get(t, base+"/agents").JSON(t); len(l["agents"].([]any)) != 0 {
		t.Fatalf("rejected registrations left records: %v", l)
	}
	// A description may run over lines and hold tabs.
	auExpect(t, "multi-line description", do(t, "POST", base+"/agents", "application/json", []byte(`{"name":"Notes","description":"line one\r\nline two\tend"}`)), 201, "")
}

func TestServiceLifecycle(t *testing.T) {
	t.Parallel()
	s := start(t, regCatalogs)
	base := s.URL
	r := postJSON(t, base+"/services", map[string]any{"id": "shipping", "name": "Shipping", "accepts": []string{"ShipOrder"}, "produces": []string{"OrderShipped"}})
	auExpect(t, "register", r, 201, "")
	sv := r.JSON(t)
	regTimestamp(t, "service", sv, "createdAt")
	if sv["id"] != "shipping" || sv["status"] != nil || fmt.Sprint(sv["accepts"]) != "[ShipOrder]" {
		t.Fatalf("record: %s", r.Body)
	}
	auExpect(t, "again", postJSON(t, base+"/services", map[string]any{"id": "shipping", "name": "x"}), 409, "SERVICE_ALREADY_REGISTERED")
	auExpect(t, "get", get(t, base+"/services/shipping"), 200, "")
	auExpect(t, "get unknown", get(t, base+"/services/nope"), 404, "SERVICE_NOT_FOUND")
	auExpect(t, "delete", do(t, "DELETE", base+"/services/shipping", "", nil), 204, "")
	auExpect(t, "get deleted", get(t, base+"/services/shipping"), 404, "SERVICE_NOT_FOUND")
	auExpect(t, "delete deleted", do(t, "DELETE", base+"/services/shipping", "", nil), 404, "SERVICE_NOT_FOUND")
	auExpect(t, "register again after delete", postJSON(t, base+"/services", map[string]any{"id": "shipping", "name": "Shipping 2"}), 201, "")
	if n := len(plWalk(t, s, url.Values{"type": {"ServiceRegistered"}}, 1000)); n != 2 {
		t.Fatalf("%d ServiceRegistered events, want 2", n)
	}
	if n := len(plWalk(t, s, url.Values{"type": {"ServiceDeleted"}}, 1000)); n != 1 {
		t.Fatalf("%d ServiceDeleted events, want 1", n)
	}
}

func TestRegistryPaging(t *testing.T) {
	t.Parallel()
	s := start(t, regCatalogs)
	base := s.URL
	want := []string{}
	for i := 9; i >= 0; i-- { // registered out of order, listed by id
		id := fmt.Sprintf("svc-%02d", i)
		want = append([]string{id}, want...)
		auExpect(t, "register "+id, postJSON(t, base+"/services", map[string]any{"id": id, "name": id}), 201, "")
	}
	var got []string
	after := ""
	pages := 0
	for {
		u := base + "/services?limit=4"
		if after != "" {
			u += "&after=" + after
		}
		r := get(t, u)
		auExpect(t, "page", r, 200, "")
		var pg struct {
			Services []struct{ ID string } `json:"services"`
			Next     *string               `json:"next"`
		}
		if err := json.Unmarshal(r.Body, &pg); err != nil {
			t.Fatal(err)
		}
		pages++
		for _, sv := range pg.Services {
			got = append(got, sv.ID)
		}
		if pg.Next == nil {
			break
		}
		after = *pg.Next
	}
	if pages != 3 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%d pages: %v, want 3 pages: %v", pages, got, want)
	}
}

// TestControlCommandsOverPOSTCommands: the registry commands sent to POST
// /commands have the same effect as the registry routes, and their traces
// show the outcome (and no sequence of the command log, which every tenant
// shares).
func TestControlCommandsOverPOSTCommands(t *testing.T) {
	t.Parallel()
	s := start(t, regCatalogs)
	base := s.URL
	reg := command("RegisterAgent", "register-agent/1.0", map[string]any{"id": "via-commands", "name": "Via commands", "accepts": []string{"ChargeCustomer"}})
	corr := submitCommand(t, base, reg)
	testkit.Eventually(t, "agent registered", func() bool { return get(t, base+"/agents/via-commands").Status == 200 })

	var tr struct {
		ID      string `json:"id"`
		Command struct {
			ID, Type, Source, Time string
			Sequence               uint64
		} `json:"command"`
		Status    string                 `json:"status"`
		Rejection *struct{ Code string } `json:"rejection"`
		Events    []json.RawMessage      `json:"events"`
		Deliver   []any                  `json:"deliveries"`
	}
	testkit.Eventually(t, "trace processed", func() bool {
		r := get(t, base+"/traces/"+corr)
		_ = json.Unmarshal(r.Body, &tr)
		return r.Status == 200 && tr.Status == "processed"
	})
	if tr.ID != corr || tr.Command.Type != "RegisterAgent" || tr.Command.Source != "e2e-test" || tr.Command.ID != reg["id"] ||
		tr.Command.Time == "" || tr.Command.Sequence != 0 || len(tr.Events) != 1 || tr.Deliver == nil || tr.Rejection != nil {
		t.Fatalf("trace: %+v", tr)
	}
	var ev map[string]any
	_ = json.Unmarshal(tr.Events[0], &ev)
	if ev["type"] != "AgentRegistered" {
		t.Fatalf("trace event: %v", ev)
	}

	// Resubmitting the same envelope is a no-op with the same id.
	if again := submitCommand(t, base, reg); again != corr {
		t.Fatalf("resubmission got id %s, want %s", again, corr)
	}
	// A second registration of the id is rejected, visibly in its trace.
	corr2 := submitCommand(t, base, command("RegisterAgent", "register-agent/1.0", map[string]any{"id": "via-commands", "name": "Again"}))
	testkit.Eventually(t, "trace rejected", func() bool {
		r := get(t, base+"/traces/"+corr2)
		_ = json.Unmarshal(r.Body, &tr)
		return r.Status == 200 && tr.Status == "rejected"
	})
	if tr.Rejection == nil || tr.Rejection.Code != "AGENT_ALREADY_REGISTERED" || len(tr.Events) != 1 {
		t.Fatalf("rejected trace: %+v", tr)
	}
	// PauseAgent through POST /commands pauses the consumer too.
	submitCommand(t, base, command("PauseAgent", "pause-agent/1.0", map[string]any{"id": "via-commands"}))
	testkit.Eventually(t, "paused", func() bool { return get(t, base+"/agents/via-commands").JSON(t)["status"] == "paused" })

	// RegisterAgent without an id registers the correlation id.
	corr3 := submitCommand(t, base, command("RegisterAgent", "register-agent/1.0", map[string]any{"name": "Anonymous"}))
	testkit.Eventually(t, "agent registered under its correlation id", func() bool { return get(t, base+"/agents/"+corr3).Status == 200 })

	auExpect(t, "unknown trace", get(t, base+"/traces/00000000-0000-0000-0000-000000000000"), 404, "TRACE_NOT_FOUND")
	auExpect(t, "invalid trace id", get(t, base+"/traces/a.b"), 400, "VALIDATION_FAILED")
	if r := get(t, base+"/traces/"+strings.Repeat("x", 5000)); r.Status != 400 || len(r.Body) > 1000 {
		t.Errorf("a 5000-character trace id: %d, %d bytes", r.Status, len(r.Body))
	}
}

// TestRegistryTimeoutAnswers202: with no processor running, a registration
// cannot finish; it answers 202 with its trace instead of hanging.
func TestRegistryTimeoutAnswers202(t *testing.T) {
	t.Parallel()
	s := start(t, regCatalogs, func(c *settings.Config) {
		c.Processor.Disabled = true
		c.Registry.WaitTimeout = settings.Duration(200 * time.Millisecond)
	})
	began := time.Now()
	r := postJSON(t, s.URL+"/agents", map[string]any{"id": "slow", "name": "Slow"})
	auExpect(t, "register", r, 202, "")
	if d := time.Since(began); d > 3*time.Second {
		t.Fatalf("202 took %v", d)
	}
	body := r.JSON(t)
	id, _ := body["id"].(string)
	if body["status"] != "accepted" || !strings.HasSuffix(r.Header.Get("Location"), "/traces/"+id) {
		t.Fatalf("202: %v Location %q", body, r.Header.Get("Location"))
	}
	testkit.Eventually(t, "trace", func() bool {
		r := get(t, s.URL+"/traces/"+id)
		return r.Status == 200 && r.JSON(t)["status"] == "accepted"
	})
	auExpect(t, "not registered yet", get(t, s.URL+"/agents/slow"), 404, "AGENT_NOT_FOUND")
}

// TestConcurrentRegistrationTwoInstances: two agentbus instances on one
// NATS, 50 concurrent registrations of one id → exactly one 201 and 49 409s,
// one AgentRegistered event. The same for a service id.
func TestConcurrentRegistrationTwoInstances(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	a := start(t, regCatalogs, regOn(natsURL))
	b := start(t, regCatalogs, regOn(natsURL))
	for _, kind := range []struct{ path, code, event string }{
		{"/agents", "AGENT_ALREADY_REGISTERED", "AgentRegistered"},
		{"/services", "SERVICE_ALREADY_REGISTERED", "ServiceRegistered"},
	} {
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			statuses = map[int]int{}
			failures []string
			created  []byte
		)
		gate := make(chan struct{})
		for i := 0; i < 50; i++ {
			base := a.URL
			if i%2 == 1 {
				base = b.URL
			}
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-gate
				st, body, err := tryJSON("POST", base+kind.path, map[string]any{"id": "contended", "name": fmt.Sprintf("caller %d", i), "accepts": []string{"ChargeCustomer"}})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					failures = append(failures, err.Error())
				case st == 409 && !strings.Contains(string(body), `"code":"`+kind.code+`"`):
					failures = append(failures, string(body))
				case st == 201:
					created = body
				}
				statuses[st]++
			}(i)
		}
		close(gate)
		wg.Wait()
		if len(failures) > 0 || statuses[201] != 1 || statuses[409] != 49 {
			t.Fatalf("%s: statuses %v, failures %v", kind.path, statuses, failures)
		}
		if n := len(plWalk(t, a, url.Values{"type": {kind.event}}, 1000)); n != 1 {
			t.Fatalf("%s: %d %s events, want 1", kind.path, n, kind.event)
		}
		// The winner's record is what both replicas answer.
		var rec struct{ Name string }
		_ = json.Unmarshal(created, &rec)
		for _, s := range []string{a.URL, b.URL} {
			testkit.Eventually(t, "replica sees the winner", func() bool {
				r := get(t, s+kind.path+"/contended")
				return r.Status == 200 && r.JSON(t)["name"] == rec.Name
			})
		}
	}
}

// TestPauseHoldsCommands: pause an agent, submit 100 commands it accepts,
// none is delivered; resume, all 100 are delivered exactly once.
func TestPauseHoldsCommands(t *testing.T) {
	t.Parallel()
	s, js := startOnNATS(t)
	base := s.URL

	// Commands accepted before the registration are not the agent's.
	before := submitCommand(t, base, chargeCustomer("before"))
	registerChargeAgent(t, base, "payer")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cons, err := js.Consumer(ctx, "AGENTBUS_COMMANDS", "agent_default_payer")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		delivered = map[string]int{} // correlation id -> deliveries
		redeliver int
	)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, _ := m.Metadata()
		mu.Lock()
		delivered[m.Headers().Get("Agentbus-Correlation-Id")]++
		if meta != nil && meta.NumDelivered > 1 {
			redeliver++
		}
		mu.Unlock()
		_ = m.Ack()
	}, jetstream.PullExpiry(30*time.Second)) // pull requests wait across the pause
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(delivered) }

	warm := submitCommand(t, base, chargeCustomer("warm-up"))
	testkit.Eventually(t, "warm-up delivered", func() bool { return count() == 1 })

	var warmDelivered uint64
	testkit.Eventually(t, "warm-up acknowledged", func() bool {
		ci := regConsumer(t, js, "agent_default_payer")
		warmDelivered = ci.Delivered.Consumer
		return ci.NumPending == 0 && ci.NumAckPending == 0
	})

	auExpect(t, "pause", do(t, "POST", base+"/agents/payer/pause", "", nil), 204, "")
	var sent []string
	for i := 0; i < 100; i++ {
		sent = append(sent, submitCommand(t, base, chargeCustomer(fmt.Sprintf("o-%d", i))))
	}
	// Once the 100 are stored and in their receipts, the paused consumer
	// holds them all, has delivered none and has nothing unacked.
	testkit.WaitIdle(t, s.Conn.JS, testkit.PipelineConsumers()...)
	ci := regConsumer(t, js, "agent_default_payer")
	if !ci.Paused || ci.NumPending != 100 || ci.NumAckPending != 0 || ci.Delivered.Consumer != warmDelivered {
		t.Fatalf("paused consumer: paused=%v pending=%d unacked=%d delivered %d (%d before the pause)",
			ci.Paused, ci.NumPending, ci.NumAckPending, ci.Delivered.Consumer, warmDelivered)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d commands delivered while paused", n-1)
	}
	if a := get(t, base+"/agents/payer").JSON(t); a["status"] != "paused" {
		t.Fatalf("status %v", a["status"])
	} else if p, _ := a["pending"].(map[string]any); p == nil || p["commands"] != 100.0 || p["inFlight"] != 0.0 {
		t.Fatalf("a paused agent's pending commands: %v", a["pending"])
	}

	auExpect(t, "resume", do(t, "POST", base+"/agents/payer/resume", "", nil), 204, "")
	resumed := time.Now()
	testkit.Eventually(t, "all 100 delivered", func() bool { return count() == 101 })
	// Delivery resumes at once, not at the agent's next pull request.
	if d := time.Since(resumed); d > 3*time.Second {
		t.Fatalf("resumed agent got its commands only %v later", d)
	}
	// Every delivery is acknowledged: nothing is left to redeliver.
	testkit.Eventually(t, "all 101 acknowledged, and getAgent says nothing is pending", func() bool {
		ci := regConsumer(t, js, "agent_default_payer")
		p, _ := get(t, base+"/agents/payer").JSON(t)["pending"].(map[string]any)
		return ci.NumPending == 0 && ci.NumAckPending == 0 && p != nil && p["commands"] == 0.0 && p["inFlight"] == 0.0
	})
	if ci := regConsumer(t, js, "agent_default_payer"); ci.NumRedelivered != 0 || ci.Delivered.Consumer != warmDelivered+100 {
		t.Fatalf("consumer after the resume: %d deliveries (%d before the pause), %d redelivered", ci.Delivered.Consumer, warmDelivered, ci.NumRedelivered)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(delivered) != 101 || redeliver != 0 {
		t.Fatalf("%d distinct deliveries, %d redeliveries", len(delivered), redeliver)
	}
	for _, c := range append(sent, warm) {
		if delivered[c] != 1 {
			t.Fatalf("command %s delivered %d times", c, delivered[c])
		}
	}
	if delivered[before] != 0 {
		t.Fatal("a command accepted before the registration was delivered to the agent")
	}
}

// TestRegistriesRebuild: registries are projections. Restarting on the same
// NATS with another data directory (which replays the event log into empty
// registries) and an explicit rebuild give byte-identical answers to every
// list and get, of agents, services and subscriptions.
func TestRegistriesRebuild(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	s1 := start(t, regCatalogs, regOn(natsURL), suLoopback, regMultiTenant)
	subs := fillRegistries(t, s1.URL)
	want := registryAnswers(t, s1.URL, subs)
	if !strings.Contains(want["/acme/subscriptions/"+subs["acme"][1]], `"disabled"`) || !strings.HasPrefix(want["/globex/subscriptions/"+subs["globex"][2]], "404") ||
		!strings.Contains(want["/initech/subscriptions"], `"subscriptions":[]`) {
		t.Fatalf("unexpected subscriptions before rebuild: %v", want)
	}
	if !strings.Contains(want["/acme/agents/ag-03"], `"paused"`) || !strings.HasPrefix(want["/acme/agents/ag-05"], "404") ||
		!strings.HasPrefix(want["/globex/services/svc-ag-06"], "404") || !strings.Contains(want["/initech/agents"], `"agents":[]`) {
		t.Fatalf("unexpected state before rebuild: %v", want)
	}
	if err := s1.Registries.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	sameAnswers(t, "after Rebuild", registryAnswers(t, s1.URL, subs), want)

	// A fresh replica on the same NATS builds its registries from the log.
	s2 := start(t, regCatalogs, regOn(natsURL), suLoopback, regMultiTenant)
	sameAnswers(t, "on a fresh replica", registryAnswers(t, s2.URL, subs), want)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s1.Stop(ctx)
	_ = s2.Stop(ctx)
	s3 := start(t, regCatalogs, regOn(natsURL), suLoopback, regMultiTenant)
	sameAnswers(t, "after a restart", registryAnswers(t, s3.URL, subs), want)
}

// regMultiTenant runs agentbus with open multi-tenancy.
func regMultiTenant(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Open = "multi", true }

// fillRegistries registers, changes and deletes agents, services and
// webhook subscriptions of the tenants acme and globex through base (a
// multi-tenant agentbus), and returns the ids of each tenant's
// subscriptions.
func fillRegistries(t *testing.T, base string) map[string][]string {
	t.Helper()
	hook := suReceiver(t)
	subs := map[string][]string{}
	for _, tenant := range []string{"acme", "globex"} {
		b := base + "/" + tenant
		auExpect(t, "service", postJSON(t, b+"/services", map[string]any{"id": "hooked", "name": "hooked"}), 201, "")
		for i := range 4 {
			body := suBody(hook, []string{suNever, fmt.Sprintf("Type%d", i)}, map[string]any{"serviceId": "hooked"})
			subs[tenant] = append(subs[tenant], suCreated(t, "subscribe", postJSON(t, b+"/subscriptions", body))["id"].(string))
		}
		auExpect(t, "delete", do(t, "DELETE", b+"/subscriptions/"+subs[tenant][2], "", nil), 204, "")
		dis := submitCommand(t, b, command("DisableSubscription", "disable-subscription/1.0", map[string]any{"id": subs[tenant][1], "reason": "410 Gone"}))
		if code := suRejection(t, b, dis); code != "" {
			t.Fatalf("DisableSubscription: %s", code)
		}
		auExpect(t, "rotate", postJSON(t, b+"/subscriptions/"+subs[tenant][3]+"/secret", map[string]any{}), 200, "")
	}
	for _, tenant := range []string{"acme", "globex"} {
		b := base + "/" + tenant
		for i := 0; i < 12; i++ {
			id := fmt.Sprintf("ag-%02d", i)
			auExpect(t, "register", postJSON(t, b+"/agents", map[string]any{"id": id, "name": tenant + " " + id, "accepts": []string{"ChargeCustomer"}}), 201, "")
			auExpect(t, "service", postJSON(t, b+"/services", map[string]any{"id": "svc-" + id, "name": id}), 201, "")
		}
		auExpect(t, "pause", do(t, "POST", b+"/agents/ag-03/pause", "", nil), 204, "")
		auExpect(t, "pause", do(t, "POST", b+"/agents/ag-04/pause", "", nil), 204, "")
		auExpect(t, "resume", do(t, "POST", b+"/agents/ag-04/resume", "", nil), 204, "")
		auExpect(t, "delete", do(t, "DELETE", b+"/agents/ag-05", "", nil), 204, "")
		auExpect(t, "delete", do(t, "DELETE", b+"/services/svc-ag-06", "", nil), 204, "")
	}
	return subs
}

// registryAnswers returns what base answers, by route, to every list and
// get of the agents, services and subscriptions fillRegistries made
// (subs), and of the tenant initech, which has none.
func registryAnswers(t *testing.T, base string, subs map[string][]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, tenant := range []string{"acme", "globex", "initech"} {
		after := "ag-00" // any id: a page starts after it
		if len(subs[tenant]) > 0 {
			after = subs[tenant][0]
		}
		for _, q := range []string{"", "?limit=1", "?limit=2&after=" + after} {
			u := "/" + tenant + "/subscriptions" + q
			out[u] = string(get(t, base+u).Body)
		}
		for _, id := range subs[tenant] {
			u := "/" + tenant + "/subscriptions/" + id
			r := get(t, base+u)
			out[u] = fmt.Sprint(r.Status, " ", string(r.Body))
		}
		for _, kind := range []string{"agents", "services"} {
			for _, q := range []string{"", "?limit=5", "?limit=5&after=ag-04", "?limit=5&after=svc-ag-04"} {
				u := "/" + tenant + "/" + kind + q
				out[u] = string(get(t, base+u).Body)
			}
			for i := 0; i < 12; i++ {
				id := fmt.Sprintf("ag-%02d", i)
				if kind == "services" {
					id = "svc-" + id
				}
				u := "/" + tenant + "/" + kind + "/" + id
				r := get(t, base+u)
				out[u] = fmt.Sprint(r.Status, " ", string(r.Body))
			}
		}
	}
	return out
}

// sameAnswers fails t for each route whose answer in got is not want's.
func sameAnswers(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for u, w := range want {
		if got[u] != w {
			t.Errorf("%s: %s differs:\n got %s\nwant %s", what, u, got[u], w)
		}
	}
}

// TestRegistryTenants: registries, consumers and traces are per tenant.
func TestRegistryTenants(t *testing.T) {
	t.Parallel()
	s, js := startOnNATS(t, func(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Open = "multi", true })
	body := map[string]any{"id": "same", "name": "n", "accepts": []string{"ChargeCustomer"}}
	auExpect(t, "t1", postJSON(t, s.URL+"/t1/agents", body), 201, "")
	auExpect(t, "t2", postJSON(t, s.URL+"/t2/agents", body), 201, "")
	auExpect(t, "t1 again", postJSON(t, s.URL+"/t1/agents", body), 409, "AGENT_ALREADY_REGISTERED")
	auExpect(t, "t2 pause", do(t, "POST", s.URL+"/t2/agents/same/pause", "", nil), 204, "")
	if a := get(t, s.URL+"/t1/agents/same").JSON(t); a["status"] != "active" {
		t.Fatalf("t1 agent changed by t2's pause: %v", a)
	}
	c1, c2 := regConsumer(t, js, "agent_t1_same"), regConsumer(t, js, "agent_t2_same")
	if c1 == nil || c2 == nil || c1.Paused || !c2.Paused || c1.Config.FilterSubject != "agentbus.cmd.t1.ChargeCustomer" {
		t.Fatalf("consumers: %+v %+v", c1, c2)
	}
	auExpect(t, "t3 empty", get(t, s.URL+"/t3/agents/same"), 404, "AGENT_NOT_FOUND")
	corr := submitCommand(t, s.URL+"/t1", command("RegisterAgent", "register-agent/1.0", map[string]any{"name": "x"}))
	testkit.Eventually(t, "trace in t1", func() bool { return get(t, s.URL+"/t1/traces/"+corr).Status == 200 })
	auExpect(t, "trace not in t2", get(t, s.URL+"/t2/traces/"+corr), 404, "TRACE_NOT_FOUND")
	if r := get(t, s.URL+"/t2/agents"); !strings.Contains(string(r.Body), `"id":"same"`) || strings.Contains(string(r.Body), corr) {
		t.Fatalf("t2 list: %s", r.Body)
	}
}

// TestTraceStatuses: a command for an agent is accepted until the agent's
// consumer delivers it, processing while the agent holds it unacked, and
// processed once the agent's event is stored.
func TestTraceStatuses(t *testing.T) {
	t.Parallel()
	s, js := startWithAgent(t, "slowpoke")
	corr := submitCommand(t, s.URL, chargeCustomer("t-1"))
	status := func() string {
		r := get(t, s.URL+"/traces/"+corr)
		if r.Status != 200 {
			return fmt.Sprint(r.Status)
		}
		st, _ := r.JSON(t)["status"].(string)
		return st
	}
	testkit.Eventually(t, "accepted", func() bool { return status() == "accepted" })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, "AGENTBUS_COMMANDS", "agent_default_slowpoke")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msg jetstream.Msg
	for m := range batch.Messages() {
		msg = m
	}
	if msg == nil || msg.Headers().Get("Agentbus-Correlation-Id") != corr {
		t.Fatalf("agent got %v", msg)
	}
	if st := status(); st != "processing" {
		t.Fatalf("delivered, unacked: status %s", st)
	}
	// The agent answers with an event carrying the correlation id.
	ev := nats.NewMsg("agentbus.evt.default.charge.t-1.CustomerCharged")
	ev.Header.Set("Nats-Msg-Id", "ev-"+corr)
	ev.Header.Set("Agentbus-Correlation-Id", corr)
	ev.Data, _ = json.Marshal(map[string]any{"specversion": "1.0", "id": "ev-" + corr, "source": "slowpoke", "type": "CustomerCharged",
		"datacontenttype": "application/json", "time": time.Now().UTC().Format(time.RFC3339), "data": map[string]any{"orderId": "t-1"}})
	if _, err := js.PublishMsg(ctx, ev); err != nil {
		t.Fatal(err)
	}
	_ = msg.Ack()
	testkit.Eventually(t, "processed", func() bool { return status() == "processed" })
}

// TestUndeliveredCommandIsRejected: a command an agent never acknowledges
// (here: nak'd at every one of its 20 deliveries) gets its terminal outcome
// all the same, a CommandRejected event with SERVICE_UNAVAILABLE naming the
// agent; a command the agent acks is left alone, even when an external
// processor's consumer gives up on it.
func TestUndeliveredCommandIsRejected(t *testing.T) {
	t.Parallel()
	s, js := startWithAgent(t, "flaky")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// An external processor's own consumer gives up on every command after
	// two deliveries: its advisories are not agentbus's to act on.
	ext, err := js.CreateConsumer(ctx, "AGENTBUS_COMMANDS", jetstream.ConsumerConfig{Durable: "billing",
		FilterSubject: "agentbus.cmd.default.ChargeCustomer", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 2})
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ext.Consume(func(m jetstream.Msg) { _ = m.Nak() })
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Stop()
	bad := submitCommand(t, s.URL, chargeCustomer("u-bad"))
	good := submitCommand(t, s.URL, chargeCustomer("u-good"))

	var naks atomic.Int64
	consumeAgent(t, js, "flaky", func(m jetstream.Msg) {
		if m.Headers().Get("Agentbus-Correlation-Id") == bad {
			naks.Add(1)
			_ = m.Nak()
			return
		}
		_ = m.Ack()
	})

	// A forged advisory, naming an agent consumer that does not exist, for
	// the command the agent acks: anyone may publish one; it changes nothing.
	last, err := js.Stream(ctx, "AGENTBUS_COMMANDS")
	if err != nil {
		t.Fatal(err)
	}
	goodMsg, err := last.GetLastMsgForSubject(ctx, "agentbus.cmd.default.ChargeCustomer")
	if err != nil {
		t.Fatal(err)
	}
	forged := fmt.Sprintf(`{"stream":"AGENTBUS_COMMANDS","consumer":"agent_default_ghost","stream_seq":%d,"deliveries":20}`, goodMsg.Sequence)
	if _, err := js.Publish(ctx, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.AGENTBUS_COMMANDS.agent_default_ghost", []byte(forged)); err != nil {
		t.Fatal(err)
	}

	evs := eventsOf(t, s.URL, bad, 1)
	if evs[0]["type"] != "CommandRejected" {
		t.Fatalf("undelivered command: %v, want CommandRejected", evs[0])
	}
	rej, _ := evs[0]["data"].(map[string]any)
	if n := naks.Load(); n != 20 {
		t.Errorf("the agent saw the command %d times, want 20 (max_deliver)", n)
	}
	if rej["code"] != "SERVICE_UNAVAILABLE" || rej["commandId"] != bad || !strings.Contains(fmt.Sprint(rej["message"]), `"flaky"`) {
		t.Errorf("rejection: %v", rej)
	}
	// Every advisory handled (and, the stream being a work queue, removed):
	// the acked command, given up on by billing only and named in the
	// forgery, has no outcome.
	testkit.Eventually(t, "advisories handled", func() bool {
		st := testkit.StreamState(t, js, "AGENTBUS_UNDELIVERED")
		return st.Msgs == 0 && st.LastSeq == 4
	})
	if r := get(t, s.URL+"/traces/"+good); r.Status != 200 || strings.Contains(string(r.Body), "CommandRejected") {
		t.Errorf("the acked command: %d %s", r.Status, r.Body)
	}
}

// startWithAgent starts agentbus on a NATS server of its own, registers the
// agent id accepting ChargeCustomer, and returns the server and a
// JetStream client of that NATS server.
func startWithAgent(t *testing.T, id string) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s, js := startOnNATS(t)
	registerChargeAgent(t, s.URL, id)
	return s, js
}

// registerChargeAgent registers the agent id accepting ChargeCustomer.
func registerChargeAgent(t *testing.T, base, id string) {
	t.Helper()
	auExpect(t, "register", postJSON(t, base+"/agents", map[string]any{"id": id, "name": "Agent " + id, "accepts": []string{"ChargeCustomer"}}), 201, "")
}

// TestDeletedAgentsConsumerGoesAfterARestart: a deleted agent whose
// consumer was not deleted (the delete failed, then agentbus stopped) loses
// it at the next start; a consumer named like an agent's that belongs to no
// agent is left alone.
func TestDeletedAgentsConsumerGoesAfterARestart(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	on := []func(*settings.Config){regCatalogs, regOn(natsURL)}
	s := start(t, on...)
	js := testkit.JetStream(t, natsURL)
	if r := postJSON(t, s.URL+"/agents", map[string]any{"id": "gone", "name": "Gone", "accepts": []string{"ChargeCustomer"}}); r.Status != 201 {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	name := "agent_default_gone"
	testkit.Eventually(t, "the agent's consumer", func() bool { return regConsumer(t, js, name) != nil })
	if r := do(t, "DELETE", s.URL+"/agents/gone", "", nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	testkit.Eventually(t, "the consumer deleted", func() bool { return regConsumer(t, js, name) == nil })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// As if the delete had failed: the consumer is there, the agent is not.
	for _, n := range []string{name, "agent_default_stranger"} {
		if _, err := js.CreateConsumer(ctx, "AGENTBUS_COMMANDS", jetstream.ConsumerConfig{Durable: n,
			FilterSubject: "agentbus.cmd.default.ChargeCustomer", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	start(t, on...)
	testkit.Eventually(t, "the orphan consumer deleted at start", func() bool { return regConsumer(t, js, name) == nil })
	if regConsumer(t, js, "agent_default_stranger") == nil {
		t.Fatal("a consumer of no agent was deleted")
	}
}

// TestRestartReconcilesOnlyWhatChanged: at a start, the agents whose
// consumers already reflect their last event cost no request of their
// own (the consumers are read in one listing); an agent whose consumer
// went missing while agentbus was stopped gets it back.
func TestRestartReconcilesOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	on := []func(*settings.Config){regCatalogs, regOn(natsURL)}
	s := start(t, on...)
	js := testkit.JetStream(t, natsURL)
	const agents = 30
	for i := range agents {
		registerChargeAgent(t, s.URL, fmt.Sprintf("a%d", i))
	}
	auExpect(t, "pause", do(t, "POST", s.URL+"/agents/a3/pause", "", nil), 204, "")
	for i := range agents {
		name := fmt.Sprintf("agent_default_a%d", i)
		testkit.Eventually(t, name, func() bool { return regConsumer(t, js, name) != nil })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// While it is stopped, one agent's consumer goes.
	if err := js.DeleteConsumer(ctx, "AGENTBUS_COMMANDS", "agent_default_a7"); err != nil {
		t.Fatal(err)
	}
	// Every JetStream API request about one agent's consumer, by name.
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var (
		mu      sync.Mutex
		touched = map[string]int{}
	)
	sub, err := nc.Subscribe("$JS.API.CONSUMER.>", func(m *nats.Msg) {
		if i := strings.Index(m.Subject, ".agent_default_"); i > 0 {
			name, _, _ := strings.Cut(m.Subject[i+1:], ".") // CREATE subjects go on with the filter
			mu.Lock()
			touched[name]++
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	start(t, on...)
	testkit.Eventually(t, "the missing consumer made again", func() bool { return regConsumer(t, js, "agent_default_a7") != nil })
	time.Sleep(time.Second) // a sweep that also took up the others would be under way by now
	mu.Lock()
	for name, n := range touched {
		if name != "agent_default_a7" {
			t.Errorf("%d requests about %s, whose consumer reflected its agent", n, name)
		}
	}
	if len(touched) == 0 {
		t.Error("no request seen about the consumer made again: the test sees nothing")
	}
	mu.Unlock()
	if ci := regConsumer(t, js, "agent_default_a3"); ci == nil || !ci.Paused {
		t.Fatalf("the paused agent's consumer after the restart: %+v", ci)
	}
}
