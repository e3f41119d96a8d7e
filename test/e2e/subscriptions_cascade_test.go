package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
)

// TestServiceDeletionDeletesItsSubscriptions: DELETE /services/{id}
// answers once the subscriptions carrying the service's id are gone, and
// only those: another service's, a standalone one, and one made for a
// later registration of the same id stay.
func TestServiceDeletionDeletesItsSubscriptions(t *testing.T) {
	t.Parallel()
	s := testkit.Agentbus(t, suLoopback) // with a NATS port: the test reads a consumer
	base, hook := s.URL, suReceiver(t)
	for _, id := range []string{"billing", "shipping"} {
		auExpect(t, "register "+id, postJSON(t, base+"/services", map[string]any{"id": id, "name": id}), 201, "")
	}
	create := func(extra map[string]any) string {
		t.Helper()
		return suCreated(t, "create", postJSON(t, base+"/subscriptions", suBody(hook, []string{suNever}, extra)))["id"].(string)
	}
	var billing []string
	for range 3 {
		billing = append(billing, create(map[string]any{"serviceId": "billing"}))
	}
	shipping, standalone := create(map[string]any{"serviceId": "shipping"}), create(nil)

	auExpect(t, "delete the service", do(t, "DELETE", base+"/services/billing", "", nil), 204, "")
	for _, id := range billing {
		auExpect(t, "its subscription "+id, get(t, base+"/subscriptions/"+id), 404, "SUBSCRIPTION_NOT_FOUND")
		suSecretErased(t, s, "default", id)
	}
	for _, id := range []string{shipping, standalone} {
		auExpect(t, "another subscription "+id, get(t, base+"/subscriptions/"+id), 200, "")
	}
	auExpect(t, "register billing again", postJSON(t, base+"/services", map[string]any{"id": "billing", "name": "again"}), 201, "")
	again := create(map[string]any{"serviceId": "billing"})
	testkit.WaitIdle(t, testkit.JetStream(t, s.Conn.ClientURL()), "AGENTBUS_EVENTS/subscriptions")
	auExpect(t, "the new registration's subscription", get(t, base+"/subscriptions/"+again), 200, "")
	if l := get(t, base+"/subscriptions").JSON(t); len(l["subscriptions"].([]any)) != 3 {
		t.Fatalf("left: %v", l)
	}
}

// TestSubscriptionRacingItsServiceDeletion: a subscription whose creation
// was decided while its service was registered, but stored after the
// service's deletion, is deleted too. The race is staged: the
// SubscriptionCreated such a creation writes is appended after the
// ServiceDeleted, as a processor would have; one made against a later
// registration of the id, and one whose service is still there, stay.
func TestSubscriptionRacingItsServiceDeletion(t *testing.T) {
	t.Parallel()
	s := testkit.Agentbus(t, suLoopback) // with a NATS port: the test appends an event
	base, hook := s.URL, suReceiver(t)
	js := testkit.JetStream(t, s.Conn.ClientURL())
	auExpect(t, "register", postJSON(t, base+"/services", map[string]any{"id": "gone", "name": "gone"}), 201, "")
	auExpect(t, "register", postJSON(t, base+"/services", map[string]any{"id": "kept", "name": "kept"}), 201, "")
	auExpect(t, "delete", do(t, "DELETE", base+"/services/gone", "", nil), 204, "")
	appendCreated := func(serviceID string) string {
		t.Helper()
		id := uuid.NewString()
		data := map[string]any{"id": id, "serviceId": serviceID, "webhook": map[string]any{"url": hook},
			"filter": map[string]any{"types": []string{suNever}}, "status": "active", "createdAt": time.Now().UTC().Format(time.RFC3339Nano)}
		env := map[string]any{"specversion": "1.0", "id": uuid.NewString(), "source": "agentbus", "type": "SubscriptionCreated",
			"datacontenttype": "application/json", "time": time.Now().UTC().Format(time.RFC3339), "data": data}
		msg := &nats.Msg{Subject: "agentbus.evt.default.subscription." + id + ".SubscriptionCreated", Data: plJSON(t, env), Header: nats.Header{}}
		msg.Header.Set("Nats-Msg-Id", uuid.NewString())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		return id
	}
	raced, alive := appendCreated("gone"), appendCreated("kept")
	testkit.Eventually(t, "the raced subscription deleted", func() bool {
		deleted := plWalk(t, s, map[string][]string{"type": {"SubscriptionDeleted"}}, 100)
		return len(deleted) == 1 && strings.Contains(string(plJSON(t, deleted[0])), raced)
	})
	suGone(t, base, raced)
	testkit.WaitIdle(t, js, "AGENTBUS_EVENTS/subscriptions", "AGENTBUS_COMMANDS/processor")
	testkit.Eventually(t, "the subscription whose service is there", func() bool { return get(t, base+"/subscriptions/"+alive).Status == 200 })
	if deleted := plWalk(t, s, map[string][]string{"type": {"SubscriptionDeleted"}}, 100); len(deleted) != 1 {
		t.Fatalf("SubscriptionDeleted events: %v", deleted)
	}
	auExpect(t, "register gone again", postJSON(t, base+"/services", map[string]any{"id": "gone", "name": "again"}), 201, "")
	later := appendCreated("gone")
	testkit.Eventually(t, "the later subscription projected", func() bool { return get(t, base+"/subscriptions/"+later).Status == 200 })
	testkit.WaitIdle(t, js, "AGENTBUS_EVENTS/subscriptions", "AGENTBUS_COMMANDS/processor")
	auExpect(t, "the later registration's subscription", get(t, base+"/subscriptions/"+later), 200, "")
}

// TestSubscriptionsCreatedWhileTheirServiceIsDeleted: subscriptions for a
// service are created while the service is being deleted; each creation
// is answered 201 (or 202) or SERVICE_NOT_FOUND, and every subscription
// created ends deleted.
func TestSubscriptionsCreatedWhileTheirServiceIsDeleted(t *testing.T) {
	t.Parallel()
	s := start(t, suLoopback)
	base, hook := s.URL, suReceiver(t)
	for round := range 3 {
		svc := fmt.Sprintf("svc-%d", round)
		auExpect(t, "register", postJSON(t, base+"/services", map[string]any{"id": svc, "name": svc}), 201, "")
		var mu sync.Mutex
		var created []string
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				if i == 4 {
					if st, b, err := tryJSON("DELETE", base+"/services/"+svc, nil); err != nil || st != 204 {
						t.Errorf("delete the service: %d %s %v", st, b, err)
					}
				}
				st, b, err := tryJSON("POST", base+"/subscriptions", suBody(hook, []string{suNever}, map[string]any{"serviceId": svc}))
				var body struct {
					ID    string `json:"id"`
					Error *struct {
						Code string `json:"code"`
					} `json:"error"`
				}
				_ = json.Unmarshal(b, &body)
				switch {
				case err != nil:
					t.Errorf("create: %v", err)
				case (st == 201 || st == 202) && body.ID != "":
					mu.Lock()
					created = append(created, body.ID)
					mu.Unlock()
				case st == 404 && body.Error != nil && body.Error.Code == "SERVICE_NOT_FOUND":
				default:
					t.Errorf("create: %d %s", st, b)
				}
			})
		}
		wg.Wait()
		for _, id := range created {
			suGone(t, base, id)
		}
	}
	if l := get(t, base+"/subscriptions").JSON(t); len(l["subscriptions"].([]any)) != 0 {
		t.Fatalf("subscriptions left: %v", l)
	}
}

// TestSubscriptionsTenantScoped: a tenant's subscriptions are its own:
// another tenant neither lists, reads, reads the secret of, rotates,
// enables nor deletes them, a read-only key does not read their secrets,
// and deleting a service of one tenant deletes the subscriptions of that
// tenant's service only, not those of another tenant's service of the same
// id.
func TestSubscriptionsTenantScoped(t *testing.T) {
	t.Parallel()
	s, keyA, keyB := tnSetup(t, suLoopback)
	hook := suReceiver(t)
	a, b := s.URL+"/a", s.URL+"/b"
	call := func(key, method, url string, body any) *response {
		t.Helper()
		var raw []byte
		if body != nil {
			raw = plJSON(t, body)
		}
		return auCall(t, "bearer", method, url, key, raw)
	}
	for _, tk := range []struct{ base, key string }{{a, keyA}, {b, keyB}} {
		auExpect(t, "register", call(tk.key, "POST", tk.base+"/services", map[string]any{"id": "shared", "name": "shared"}), 201, "")
	}
	recA := suCreated(t, "a's", call(keyA, "POST", a+"/subscriptions", suBody(hook, []string{suNever}, map[string]any{"serviceId": "shared"})))
	subA := recA["id"].(string)
	secretA := suSecretIn(t, "a reads a's secret", call(keyA, "GET", a+"/subscriptions/"+subA+"/secret", nil), subA)
	subB := suCreated(t, "b's", call(keyB, "POST", b+"/subscriptions", suBody(hook, []string{suNever}, map[string]any{"serviceId": "shared"})))["id"].(string)
	if got := fmt.Sprint(s.Registries.Subscriptions.Tenants()); got != "[a b]" {
		t.Fatalf("tenants with subscriptions: %s", got)
	}
	if r := call(keyB, "GET", b+"/subscriptions", nil); r.Status != 200 || strings.Contains(string(r.Body), subA) {
		t.Fatalf("b lists: %d %s", r.Status, r.Body)
	}
	auExpect(t, "b gets a's", call(keyB, "GET", b+"/subscriptions/"+subA, nil), 404, "SUBSCRIPTION_NOT_FOUND")
	auExpect(t, "b deletes a's", call(keyB, "DELETE", b+"/subscriptions/"+subA, nil), 404, "SUBSCRIPTION_NOT_FOUND")
	auExpect(t, "b rotates a's", call(keyB, "POST", b+"/subscriptions/"+subA+"/secret", map[string]any{}), 404, "SUBSCRIPTION_NOT_FOUND")
	auExpect(t, "b reads a's secret", call(keyB, "GET", b+"/subscriptions/"+subA+"/secret", nil), 404, "SUBSCRIPTION_NOT_FOUND")
	auExpect(t, "a's key reads b's secret", call(keyA, "GET", b+"/subscriptions/"+subB+"/secret", nil), 403, "FORBIDDEN")
	readOnly := testkit.Key(t, s, []string{"a"}, auth.ScopeRead)
	testkit.Eventually(t, "the read-only key works", func() bool { return call(readOnly, "GET", a+"/subscriptions/"+subA, nil).Status == 200 })
	auExpect(t, "a read-only key reads a's secret", call(readOnly, "GET", a+"/subscriptions/"+subA+"/secret", nil), 403, "FORBIDDEN")
	auExpect(t, "b enables a's", call(keyB, "POST", b+"/subscriptions/"+subA+"/enable", nil), 404, "SUBSCRIPTION_NOT_FOUND")
	auExpect(t, "a's key on b's routes", call(keyA, "GET", b+"/subscriptions/"+subB, nil), 403, "FORBIDDEN")
	rot := submitAs(t, b, keyB, command("RotateSubscriptionSecret", "rotate-subscription-secret/1.0",
		map[string]any{"id": subA, "secret": strings.Repeat("s", 30)}))
	auExpect(t, "b rotates a's as a command", rot, 202, "")
	rotCorr := rot.JSON(t)["id"].(string)
	testkit.Eventually(t, "b's rotation of a's rejected", func() bool {
		r := auCall(t, "bearer", "GET", b+"/traces/"+rotCorr, keyB, nil)
		return r.Status == 200 && strings.Contains(string(r.Body), `"code":"SUBSCRIPTION_NOT_FOUND"`)
	})
	auExpect(t, "a's after b's attempts", call(keyA, "GET", a+"/subscriptions/"+subA, nil), 200, "")
	suSignsWith(t, s, "a", subA, secretA)

	auExpect(t, "a deletes its service", call(keyA, "DELETE", a+"/services/shared", nil), 204, "")
	auExpect(t, "a's subscription", call(keyA, "GET", a+"/subscriptions/"+subA, nil), 404, "SUBSCRIPTION_NOT_FOUND")
	testkit.WaitIdle(t, s.Conn.JS, "AGENTBUS_EVENTS/subscriptions", "AGENTBUS_COMMANDS/processor")
	auExpect(t, "b's subscription", call(keyB, "GET", b+"/subscriptions/"+subB, nil), 200, "")
	if got := fmt.Sprint(s.Registries.Subscriptions.Tenants()); got != "[b]" {
		t.Fatalf("tenants with subscriptions after a's went: %s", got)
	}
}

// submitAs posts a command envelope with a bearer key and returns the
// answer.
func submitAs(t *testing.T, base, key string, env map[string]any) *response {
	t.Helper()
	return auCall(t, "bearer", "POST", base+"/commands", key, plJSON(t, env))
}
