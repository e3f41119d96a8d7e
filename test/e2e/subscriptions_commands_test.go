package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestSubscriptionQuota: a tenant has at most quotas.subscriptions
// subscriptions; one more is QUOTA_EXCEEDED, over REST and as a command,
// and the secret stored for it is erased; after a deletion there is room
// again.
func TestSubscriptionQuota(t *testing.T) {
	t.Parallel()
	s := start(t, suLoopback, func(c *settings.Config) { c.Quotas.Subscriptions = 2 })
	base, hook := s.URL, suReceiver(t)
	var ids []string
	for range 2 {
		ids = append(ids, suCreated(t, "create", postJSON(t, base+"/subscriptions", suBody(hook, []string{suNever}, nil)))["id"].(string))
	}
	over := postJSON(t, base+"/subscriptions", suBody(hook, []string{suNever}, nil))
	e := plError(t, over, 403, "QUOTA_EXCEEDED")
	corr, _ := e.Details["correlationId"].(string)
	if corr == "" || !strings.Contains(e.Message, "quotas.subscriptions") {
		t.Fatalf("over the quota: %s", over.Body)
	}
	suSecretErased(t, s, "default", corr)
	cmd := submitCommand(t, base, command("CreateSubscription", "create-subscription/1.0", suWithSecret(hook, strings.Repeat("q", 30), []string{suNever})))
	if code := suRejection(t, base, cmd); code != "QUOTA_EXCEEDED" {
		t.Fatalf("a command over the quota: %q", code)
	}
	suSecretErased(t, s, "default", cmd)
	auExpect(t, "delete", do(t, "DELETE", base+"/subscriptions/"+ids[0], "", nil), 204, "")
	suCreated(t, "create after a delete", postJSON(t, base+"/subscriptions", suBody(hook, []string{suNever}, nil)))
}

// TestSubscriptionStatus: the status a delivery engine sets through
// commands — disabled (DisableSubscription, after a 410), failing
// (MarkSubscriptionFailing, after a dead letter) — shows in the record with
// its reason, is carried by every event, survives a secret rotation, and
// enableSubscription makes the subscription active again. Disabling twice,
// or marking a disabled one failing, is a CONFLICT; enabling an active one
// SUBSCRIPTION_ALREADY_ACTIVE.
func TestSubscriptionStatus(t *testing.T) {
	t.Parallel()
	s := start(t, suLoopback)
	base, hook := s.URL, suReceiver(t)
	id := suCreated(t, "create", postJSON(t, base+"/subscriptions", suBody(hook, []string{suNever}, nil)))["id"].(string)
	send := func(typ, schema string, data map[string]any) string {
		t.Helper()
		return suRejection(t, base, submitCommand(t, base, command(typ, schema, data)))
	}
	// status reads the record until it shows want: a command published on
	// NATS is done once its events are stored, and the registry applies
	// them from the replica's follower of the log a moment later.
	status := func(want, reason string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			rec := get(t, base+"/subscriptions/"+id).JSON(t)
			if rec["status"] == want && (reason == "") == (rec["statusReason"] == nil) && (reason == "" || rec["statusReason"] == reason) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("want %s (%q): %v", want, reason, rec)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	disable := func() string {
		return send("DisableSubscription", "disable-subscription/1.0", map[string]any{"id": id, "reason": "the receiver answered 410 Gone"})
	}
	// MarkSubscriptionFailing is internal: webhook delivery puts it on the
	// command log, and no caller can submit it.
	failing := func(reason string) string {
		t.Helper()
		env := command("MarkSubscriptionFailing", "mark-subscription-failing/1.0", map[string]any{"id": id, "reason": reason, "eventSeq": 7})
		plError(t, postJSON(t, base+"/commands", env), 403, "FORBIDDEN")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := s.Conn.JS.Publish(ctx, "agentbus.cmd.default.MarkSubscriptionFailing", plJSON(t, env)); err != nil {
			t.Fatal(err)
		}
		return suRejection(t, base, envelope.CorrelationID("default", env["source"].(string), env["id"].(string)))
	}
	if code := disable(); code != "" {
		t.Fatalf("disable: %s", code)
	}
	status("disabled", "the receiver answered 410 Gone")
	if code := disable(); code != "CONFLICT" {
		t.Fatalf("disable a disabled one: %q", code)
	}
	if code := failing("8 attempts failed"); code != "CONFLICT" {
		t.Fatalf("mark a disabled one failing: %q", code)
	}
	auExpect(t, "enable", do(t, "POST", base+"/subscriptions/"+id+"/enable", "", nil), 204, "")
	status("active", "")
	if code := failing("8 attempts failed; the last: 503"); code != "" {
		t.Fatalf("mark failing: %s", code)
	}
	status("failing", "8 attempts failed; the last: 503")
	auExpect(t, "rotate", postJSON(t, base+"/subscriptions/"+id+"/secret", map[string]any{}), 200, "")
	status("failing", "8 attempts failed; the last: 503")
	auExpect(t, "enable", do(t, "POST", base+"/subscriptions/"+id+"/enable", "", nil), 204, "")
	status("active", "")
	auExpect(t, "enable again", do(t, "POST", base+"/subscriptions/"+id+"/enable", "", nil), 409, "SUBSCRIPTION_ALREADY_ACTIVE")
	if code := send("DisableSubscription", "disable-subscription/1.0", map[string]any{"id": "no-such-subscription", "reason": "x"}); code != "SUBSCRIPTION_NOT_FOUND" {
		t.Fatalf("disable an unknown subscription: %q", code)
	}

	want := map[string]string{"SubscriptionCreated": "active", "SubscriptionDisabled": "disabled", "SubscriptionEnabled": "active",
		"SubscriptionFailing": "failing", "SubscriptionSecretRotated": "failing"}
	evs := plWalk(t, s, map[string][]string{"type": {"SubscriptionCreated", "SubscriptionDisabled", "SubscriptionEnabled", "SubscriptionFailing", "SubscriptionSecretRotated"}}, 100)
	if len(evs) != 6 {
		t.Fatalf("%d subscription events, want 6: %v", len(evs), evs)
	}
	for _, ev := range evs {
		data := ev["data"].(map[string]any)
		typ := ev["type"].(string)
		if data["id"] != id || data["status"] != want[typ] {
			t.Fatalf("%s: %v", typ, data)
		}
		if typ == "SubscriptionFailing" && (data["eventSeq"] != float64(7) || data["reason"] == nil) {
			t.Fatalf("%s: %v", typ, data)
		}
	}
}

// TestSubscriptionCommandsStraightToNATS: the subscription commands
// published on the command log without going through agentbus's
// operations are refused by their processor when they would make a
// subscription without a stored secret, or would store a secret in an
// event; the CommandRejected does not quote the secret.
func TestSubscriptionCommandsStraightToNATS(t *testing.T) {
	t.Parallel()
	s := start(t, suLoopback)
	base, hook := s.URL, suReceiver(t)
	id := suCreated(t, "create", postJSON(t, base+"/subscriptions", suBody(hook, []string{suNever}, nil)))["id"].(string)
	publish := func(env map[string]any) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := s.Conn.JS.Publish(ctx, "agentbus.cmd.default."+env["type"].(string), plJSON(t, env)); err != nil {
			t.Fatal(err)
		}
		return envelope.CorrelationID("default", env["source"].(string), env["id"].(string))
	}
	secret := strings.Repeat("n", 12) + "-published-to-nats"
	cases := []struct {
		name string
		env  map[string]any
	}{
		{"create without a stored secret", command("CreateSubscription", "create-subscription/1.0", suBody(hook, []string{suNever}, nil))},
		{"create with a secret in it", command("CreateSubscription", "create-subscription/1.0", suWithSecret(hook, secret, []string{suNever}))},
		{"rotate with a secret in it", command("RotateSubscriptionSecret", "rotate-subscription-secret/1.0", map[string]any{"id": id, "secret": secret})},
		{"rotate without its validity", command("RotateSubscriptionSecret", "rotate-subscription-secret/1.0", map[string]any{"id": id})},
	}
	for _, tt := range cases {
		corr := publish(tt.env)
		if code := suRejection(t, base, corr); code != "VALIDATION_FAILED" {
			t.Fatalf("%s: outcome %q", tt.name, code)
		}
		if tr := get(t, base+"/traces/"+corr); strings.Contains(string(tr.Body), secret) {
			t.Fatalf("%s: the trace quotes the secret: %s", tt.name, tr.Body)
		}
	}
	if l := get(t, base+"/subscriptions").JSON(t); len(l["subscriptions"].([]any)) != 1 {
		t.Fatalf("subscriptions: %v", l)
	}
	if evs := plWalk(t, s, map[string][]string{"type": {"SubscriptionSecretRotated"}}, 100); len(evs) != 0 {
		t.Fatalf("rotations recorded: %v", evs)
	}
	testkit.WaitIdle(t, s.Conn.JS, "AGENTBUS_EVENTS/subscriptions")
}
