package abuse_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"

	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
)

// ctlQuota sets the per-tenant quotas of agents and services.
func ctlQuota(agents, services int) func(*settings.Config) {
	return func(c *settings.Config) { c.Quotas.Agents, c.Quotas.Services = agents, services }
}

// ctlConsumerLimit plans the command stream for at most n consumers.
func ctlConsumerLimit(n int) func(*settings.Config) {
	return func(c *settings.Config) { c.Quotas.CommandConsumers = n }
}

// TestControlTenantFloodLeavesOthersServed: a read-write key of tenant a
// registers agents as fast as it can from several connections. It gets its
// quota and then 403 QUOTA_EXCEEDED, while tenant b's registration and
// pause, sent in the middle of the flood, take effect at once.
func TestControlTenantFloodLeavesOthersServed(t *testing.T) {
	const quota, flood, senders = 20, 60, 4
	url, js := ctlNATS(t, 0)
	s, keyA, keyB := ctlStart(t, url, ctlQuota(quota, quota))
	ctlMust(t, "b registers b-keep", ctlCall(http.MethodPost, s.URL+"/b/agents", keyB, ctlAgent("b-keep", "ShipOrder")), 201, "")

	var (
		mu      sync.Mutex
		answers []ctlAnswer
		wg      sync.WaitGroup
		started = make(chan struct{})
		once    sync.Once
	)
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range flood / senders {
				a := ctlCall(http.MethodPost, s.URL+"/a/agents", keyA, ctlAgent(fmt.Sprintf("a-%d-%d", w, i), "ShipOrder"))
				mu.Lock()
				answers = append(answers, a)
				if len(answers) >= quota/2 {
					once.Do(func() { close(started) })
				}
				mu.Unlock()
			}
		}()
	}
	<-started
	reg := ctlCall(http.MethodPost, s.URL+"/b/agents", keyB, ctlAgent("b-new", "ShipOrder"))
	pause := ctlCall(http.MethodPost, s.URL+"/b/agents/b-keep/pause", keyB, nil)
	wg.Wait()

	// Tenant b was served in the middle of the flood: its writes took
	// effect before they were answered (a 202 would mean they had not
	// within registry.waitTimeout).
	ctlMust(t, "b registers b-new during the flood", reg, 201, "")
	if st := reg.json()["status"]; st != "active" {
		t.Fatalf("b-new: status %v, want active: %s", st, reg)
	}
	ctlMust(t, "b pauses b-keep during the flood", pause, 204, "")
	if c := ctlConsumer(t, js, "agent_b_b-new"); c == nil {
		t.Fatal("b-new has no consumer")
	}
	if c := ctlConsumer(t, js, "agent_b_b-keep"); c == nil || !c.Paused {
		t.Fatalf("b-keep's consumer is not paused: %+v", c)
	}

	// Tenant a got its quota, then a clear refusal.
	created, refused := 0, 0
	for _, a := range answers {
		switch {
		case a.Err == nil && (a.Status == 201 || a.Status == 202):
			created++
		case a.Err == nil && a.Status == 403 && a.code() == "QUOTA_EXCEEDED":
			refused++
		default:
			t.Errorf("a's registration: %s", a)
		}
	}
	// Registrations decided at the same moment may overshoot the quota a
	// little (one per sender at most).
	if created < quota || created > quota+senders || refused == 0 {
		t.Fatalf("tenant a: %d registered, %d refused with QUOTA_EXCEEDED; want %d (up to %d) registered and the rest refused", created, refused, quota, quota+senders)
	}
	t.Logf("tenant a: %d registered, %d refused; tenant b: registration %s, pause %s", created, refused, reg.Took, pause.Took)
	list := ctlCall(http.MethodGet, s.URL+"/a/agents?limit=1000", keyA, nil)
	ctlMust(t, "list a's agents", list, 200, "")
	if n := len(list.json()["agents"].([]any)); n != created {
		t.Fatalf("a has %d agents listed, %d registrations answered", n, created)
	}
}

// TestControlQuotas: the quotas hold however the registration comes: over
// REST (403 QUOTA_EXCEEDED, nothing queued) and as a command through POST
// /commands (rejected with QUOTA_EXCEEDED in its trace); a deletion makes
// room again, and re-registering an id that exists is still a conflict.
// The command stream's consumer limit is the one the quotas plan.
func TestControlQuotas(t *testing.T) {
	t.Parallel()
	url, js := ctlNATS(t, 0)
	s, keyA, keyB := ctlStart(t, url, ctlQuota(2, 1))
	// The command stream is planned for the quotas: 2 agents for each of
	// the 2 tenants, and 64 more.
	if got := testkit.StreamInfo(t, js, "AGENTBUS_COMMANDS").Config.MaxConsumers; got != 2*2+64 {
		t.Fatalf("the command stream takes %d consumers, want %d", got, 2*2+64)
	}
	for _, id := range []string{"one", "two"} {
		ctlMust(t, "register "+id, ctlCall(http.MethodPost, s.URL+"/a/agents", keyA, ctlAgent(id, "ShipOrder")), 201, "")
	}
	ctlMust(t, "third agent", ctlCall(http.MethodPost, s.URL+"/a/agents", keyA, ctlAgent("three")), 403, "QUOTA_EXCEEDED")
	ctlMust(t, "an existing id", ctlCall(http.MethodPost, s.URL+"/a/agents", keyA, ctlAgent("one")), 409, "AGENT_ALREADY_REGISTERED")
	ctlMust(t, "b is not a's quota", ctlCall(http.MethodPost, s.URL+"/b/agents", keyB, ctlAgent("one")), 201, "")

	sub := ctlCall(http.MethodPost, s.URL+"/a/commands", keyA, ctlCommand("RegisterAgent", "register-agent/1.0", ctlAgent("three")))
	ctlMust(t, "RegisterAgent over POST /commands", sub, 202, "")
	corr, _ := sub.json()["id"].(string)
	testkit.Eventually(t, "the command's rejection", func() bool {
		tr := ctlCall(http.MethodGet, s.URL+"/a/traces/"+corr, keyA, nil)
		rej, _ := tr.json()["rejection"].(map[string]any)
		return tr.Status == 200 && tr.json()["status"] == "rejected" && rej["code"] == "QUOTA_EXCEEDED"
	})

	ctlMust(t, "delete two", ctlCall(http.MethodDelete, s.URL+"/a/agents/two", keyA, nil), 204, "")
	ctlMust(t, "three after a deletion", ctlCall(http.MethodPost, s.URL+"/a/agents", keyA, ctlAgent("three")), 201, "")

	svc := map[string]any{"id": "billing", "name": "Billing"}
	ctlMust(t, "first service", ctlCall(http.MethodPost, s.URL+"/a/services", keyA, svc), 201, "")
	svc["id"] = "shipping"
	ctlMust(t, "second service", ctlCall(http.MethodPost, s.URL+"/a/services", keyA, svc), 403, "QUOTA_EXCEEDED")
}

// TestControlFailingConsumersDoNotBlockOthers: the command stream is full
// (other programs hold its consumers), so none of tenant a's new agents
// can get its consumer. Their reconciliation fails, and must neither hold
// up tenant b's pause, which answers 204 at once, nor leave an agent
// without a consumer claiming to be active: such an agent's record says
// "failed", and why, and its registration's trace shows it. Once there is
// room, the next change of the agent makes its consumer.
func TestControlFailingConsumersDoNotBlockOthers(t *testing.T) {
	t.Parallel()
	const limit = 100
	url, js := ctlNATS(t, limit)
	s, keyA, keyB := ctlStart(t, url, ctlConsumerLimit(limit))
	ctlMust(t, "b registers b-keep", ctlCall(http.MethodPost, s.URL+"/b/agents", keyB, ctlAgent("b-keep", "ShipOrder")), 201, "")
	external := ctlFillConsumers(t, js, limit)

	var wg sync.WaitGroup
	regs := make([]ctlAnswer, 5)
	for i := range regs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			regs[i] = ctlCall(http.MethodPost, s.URL+"/a/agents", keyA, ctlAgent(fmt.Sprintf("a-%d", i), "ChargeCustomer"))
		}()
	}
	// One more as a command, whose trace is known by the id it is
	// answered with.
	byCmd := ctlCall(http.MethodPost, s.URL+"/a/commands", keyA, ctlCommand("RegisterAgent", "register-agent/1.0", ctlAgent("a-cmd", "ChargeCustomer")))
	time.Sleep(300 * time.Millisecond) // a's reconciliations are failing now
	pause := ctlCall(http.MethodPost, s.URL+"/b/agents/b-keep/pause", keyB, nil)
	newB := ctlCall(http.MethodPost, s.URL+"/b/agents", keyB, ctlAgent("b-new", "ShipOrder"))
	wg.Wait()

	ctlMust(t, "b pauses b-keep while a's consumers fail", pause, 204, "")
	if c := ctlConsumer(t, js, "agent_b_b-keep"); c == nil || !c.Paused {
		t.Fatalf("b-keep's consumer is not paused: %+v", c)
	}
	for i, a := range regs {
		ctlAgentFailed(t, s.URL+"/a", keyA, fmt.Sprintf("a-%d", i), a)
	}
	ctlAgentFailed(t, s.URL+"/b", keyB, "b-new", newB)
	ctlAgentFailed(t, s.URL+"/a", keyA, "a-cmd", byCmd)

	// Room again: the next change of b-new makes its consumer.
	if err := js.DeleteConsumer(t.Context(), "AGENTBUS_COMMANDS", external[0]); err != nil {
		t.Fatal(err)
	}
	ctlMust(t, "pause b-new once there is room", ctlCall(http.MethodPost, s.URL+"/b/agents/b-new/pause", keyB, nil), 204, "")
	if c := ctlConsumer(t, js, "agent_b_b-new"); c == nil || !c.Paused {
		t.Fatalf("b-new's consumer is not there, paused: %+v", c)
	}
	got := ctlCall(http.MethodGet, s.URL+"/b/agents/b-new", keyB, nil)
	if st := got.json()["status"]; st != "paused" {
		t.Fatalf("b-new after its consumer was made: %s", got)
	}
}

// TestControlRetryingAgentsDoNotBlockOthers: forty of tenant a's agents
// keep failing for a while (registrations written straight to NATS naming
// commands that are not there: the start of their consumers cannot be
// found, which may pass, so they are retried). Tenant b's pause and
// registration, sent meanwhile, still take effect at once: the retries
// hold no place on the control consumer that b's events wait for.
func TestControlRetryingAgentsDoNotBlockOthers(t *testing.T) {
	t.Parallel()
	url, js := ctlNATS(t, 0)
	s, _, keyB := ctlStart(t, url)
	ctlMust(t, "b registers b-keep", ctlCall(http.MethodPost, s.URL+"/b/agents", keyB, ctlAgent("b-keep", "ShipOrder")), 201, "")
	for i := range 40 {
		id := fmt.Sprintf("stuck-%d", i)
		data := map[string]any{"id": id, "name": id, "description": "", "accepts": []string{"ShipOrder"}, "produces": []string{},
			"status": "active", "createdAt": time.Now().UTC().Format(time.RFC3339Nano)}
		env, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": "stuck-event-" + id, "source": "elsewhere", "type": "AgentRegistered",
			"datacontenttype": "application/json", "time": time.Now().UTC().Format(time.RFC3339), "data": data})
		msg := &nats.Msg{Subject: "agentbus.evt.a.agent." + id + ".AgentRegistered", Data: env,
			Header: nats.Header{"Agentbus-Correlation-Id": {"no-such-command-" + id}}}
		if _, err := js.PublishMsg(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // a's reconciliations are failing now

	pause := ctlCall(http.MethodPost, s.URL+"/b/agents/b-keep/pause", keyB, nil)
	ctlMust(t, "b pauses b-keep while a's agents are retried", pause, 204, "")
	reg := ctlCall(http.MethodPost, s.URL+"/b/agents", keyB, ctlAgent("b-new", "ShipOrder"))
	ctlMust(t, "b registers b-new while a's agents are retried", reg, 201, "")
	if st := reg.json()["status"]; st != "active" {
		t.Fatalf("b-new: %s", reg)
	}
	if c := ctlConsumer(t, js, "agent_b_b-keep"); c == nil || !c.Paused {
		t.Fatalf("b-keep's consumer is not paused: %+v", c)
	}
	if c := ctlConsumer(t, js, "agent_b_b-new"); c == nil {
		t.Fatal("b-new has no consumer")
	}
	if c := ctlConsumer(t, js, "agent_a_stuck-0"); c != nil {
		t.Fatal("a's stuck agent has a consumer: the test's premise does not hold")
	}
	t.Logf("tenant b: pause %s, registration %s", pause.Took, reg.Took)
}

// ctlAgentFailed fails t unless agent id, registered with answer reg,
// says within seconds that it has no consumer ("status": "failed", with
// the error) instead of claiming to be active, and, when reg named the
// registration's trace (202), the trace holds the AgentConsumerFailed
// event.
func ctlAgentFailed(t *testing.T, base, key, id string, reg ctlAnswer) {
	t.Helper()
	if reg.Err != nil || reg.Status != 201 && reg.Status != 202 {
		t.Fatalf("register %s: %s", id, reg)
	}
	var rec ctlAnswer
	testkit.Eventually(t, id+" failed", func() bool {
		rec = ctlCall(http.MethodGet, base+"/agents/"+id, key, nil)
		return rec.Status == 200 && rec.json()["status"] == "failed"
	})
	if e, _ := rec.json()["error"].(string); !strings.Contains(e, "consumer") {
		t.Fatalf("%s: the record does not say why: %s", id, rec)
	}
	if reg.Status != 202 {
		return
	}
	corr, _ := reg.json()["id"].(string)
	testkit.Eventually(t, id+"'s trace showing the failure", func() bool {
		tr := ctlCall(http.MethodGet, base+"/traces/"+corr, key, nil)
		return strings.Contains(string(tr.Body), `"type":"AgentConsumerFailed"`)
	})
}

// TestControlHugeRegistrationArraysRefused: registration bodies with
// thousands of accepts or produces entries, or a megabyte of them, are
// refused (400 VALIDATION_FAILED at the array) in milliseconds, over
// REST and through POST /commands alike, and what is refused costs little
// CPU however large it is.
func TestControlHugeRegistrationArraysRefused(t *testing.T) {
	s := testkit.Agentbus(t, testkit.NoNATSPort)
	type tc struct {
		name, path, field string
		body              []byte
	}
	var cases []tc
	for _, n := range []int{1000, 3000, 5000, 10000} {
		for _, f := range []string{"accepts", "produces"} {
			b, _ := json.Marshal(map[string]any{"name": "huge", f: ctlTypes(n)})
			cases = append(cases, tc{fmt.Sprintf("agent %s %d", f, n), "/agents", f, b},
				tc{fmt.Sprintf("service %s %d", f, n), "/services", f, b})
		}
	}
	// About a megabyte of one short entry, again and again: as many
	// violations as entries if each were reported.
	mega := []byte(`{"name":"huge","accepts":[` + strings.Repeat(`"A",`, 250_000) + `"A"]}`)
	cases = append(cases, tc{"a megabyte of duplicates", "/agents", "accepts", mega})
	bad := []byte(`{"name":"huge","accepts":[` + strings.Repeat(`"a",`, 250_000) + `"a"]}`)
	cases = append(cases, tc{"a megabyte of invalid entries", "/agents", "accepts", bad})
	env, _ := json.Marshal(ctlCommand("RegisterAgent", "register-agent/1.0", map[string]any{"name": "huge", "accepts": ctlTypes(10000)}))
	cases = append(cases, tc{"RegisterAgent command", "/commands", "data.accepts", env})

	for _, c := range cases {
		cpu := processCPU(t)
		a := ctlCall(http.MethodPost, s.URL+c.path, "", c.body)
		used := processCPU(t) - cpu
		ctlMust(t, c.name, a, 400, "VALIDATION_FAILED")
		if !strings.Contains(string(a.Body), `"path":"$.`+c.field+`"`) {
			t.Errorf("%s: no violation at $.%s: %.300s", c.name, c.field, a.Body)
		}
		if len(a.Body) > 16<<10 {
			t.Errorf("%s: a %d-byte answer", c.name, len(a.Body))
		}
		// Judged by the CPU it cost (the machine may be busy with other
		// work; the wall-clock bound only catches a hang), generously for
		// a 2-core machine and the race detector: a quadratic check, or
		// one violation per entry, costs several seconds here.
		if a.Took > 15*time.Second || used > 2*time.Second {
			t.Errorf("%s (%d bytes): refused after %s, %s of CPU", c.name, len(c.body), a.Took, used)
		}
		t.Logf("%s (%d bytes): refused after %s, %s of CPU", c.name, len(c.body), a.Took.Round(time.Microsecond), used)
	}
}

// TestControlForgedRegistrationWithHugeArrays: an AgentRegistered event
// published straight to NATS with thousands of accepted types (not what
// agentbus writes) is not made into a consumer with thousands of filters,
// which would cost the server seconds of CPU: the agent's record says
// its consumer failed, and why.
func TestControlForgedRegistrationWithHugeArrays(t *testing.T) {
	url, js := ctlNATS(t, 0)
	s := testkit.Agentbus(t, testkit.NoNATSPort, func(c *settings.Config) { c.NATS.URL = url })
	data := map[string]any{"id": "forged", "name": "forged", "description": "", "accepts": ctlTypes(5000), "produces": []string{},
		"status": "active", "createdAt": time.Now().UTC().Format(time.RFC3339Nano)}
	env, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": "forged-1", "source": "intruder", "type": "AgentRegistered",
		"datacontenttype": "application/json", "time": time.Now().UTC().Format(time.RFC3339), "data": data})
	cpu := processCPU(t)
	if _, err := js.Publish(t.Context(), "agentbus.evt.default.agent.forged.AgentRegistered", env); err != nil {
		t.Fatal(err)
	}
	var rec ctlAnswer
	testkit.Eventually(t, "the forged agent's record", func() bool {
		rec = ctlCall(http.MethodGet, s.URL+"/agents/forged", "", nil)
		return rec.Status == 200 && rec.json()["status"] == "failed"
	})
	if used := processCPU(t) - cpu; used > 2*time.Second {
		t.Errorf("the forged registration cost %s of CPU", used)
	}
	if c := ctlConsumer(t, js, "agent_default_forged"); c != nil {
		t.Fatalf("a consumer with %d filters was made", len(c.Config.FilterSubjects))
	}
	if e, _ := rec.json()["error"].(string); !strings.Contains(e, "types") {
		t.Fatalf("the record does not say why: %s", rec)
	}
}
