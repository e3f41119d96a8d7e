package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/secrets"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// The subscription tests create subscriptions only to loopback receivers
// they start themselves (suReceiver), and, where no delivery is the
// point, filtered to a type no event has (suNever).

// suNever is an event type nothing emits.
const suNever = "NeverEmittedByAnything"

// suLoopback lets agentbus subscribe loopback receivers: every test that
// creates a subscription applies it, turning on the operator's switch that
// allows private and loopback targets.
func suLoopback(c *settings.Config) { c.Webhooks.AllowPrivate = true }

// suReceiver starts a loopback HTTP receiver for webhook deliveries,
// answering 204, and returns its URL.
func suReceiver(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/hook"
}

// suBody is a subscription request body for url, filtered to types (none:
// no filter), with extra members.
func suBody(url string, types []string, extra map[string]any) map[string]any {
	b := map[string]any{"webhook": map[string]any{"url": url}}
	if types != nil {
		b["filter"] = map[string]any{"types": types}
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// suWithSecret is suBody with webhook.secret.
func suWithSecret(url, secret string, types []string) map[string]any {
	b := suBody(url, types, nil)
	b["webhook"].(map[string]any)["secret"] = secret
	return b
}

// suCreated fails unless r is the 201 of a subscription creation, and
// returns its record.
func suCreated(t *testing.T, what string, r *response) map[string]any {
	t.Helper()
	auExpect(t, what, r, 201, "")
	rec := r.JSON(t)
	id, _ := rec["id"].(string)
	if id == "" || !strings.HasSuffix(r.Header.Get("Location"), "/subscriptions/"+id) || rec["status"] != "active" {
		t.Fatalf("%s: record %s, Location %q", what, r.Body, r.Header.Get("Location"))
	}
	return rec
}

// suSecretIn fails unless r is getSubscriptionSecret's answer for
// subscription id — 200, Cache-Control: no-store, exactly {id, secret} —
// and returns the secret.
func suSecretIn(t *testing.T, what string, r *response, id string) string {
	t.Helper()
	auExpect(t, what, r, 200, "")
	var body map[string]string
	if err := json.Unmarshal(r.Body, &body); err != nil || len(body) != 2 || body["id"] != id || secrets.Problem(body["secret"]) != "" {
		t.Fatalf("%s: want {id, secret} of %s, got %d bytes (%v)", what, id, len(r.Body), err)
	}
	if cc := r.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("%s: Cache-Control %q, want no-store", what, cc)
	}
	return body["secret"]
}

// suSecret reads subscription id's current secret from GET
// base/subscriptions/{id}/secret.
func suSecret(t *testing.T, base, id string) string {
	t.Helper()
	return suSecretIn(t, "GET /subscriptions/"+id+"/secret", get(t, base+"/subscriptions/"+id+"/secret"), id)
}

// suSigning returns the signing keys agentbus keeps for subscription id.
func suSigning(t *testing.T, s *server.Server, tenant, id string) ([][]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Secrets.Signing(ctx, tenant, id)
}

// suSignsWith fails unless subscription id's deliveries are signed with
// exactly the secrets given, the current one first.
func suSignsWith(t *testing.T, s *server.Server, tenant, id string, want ...string) {
	t.Helper()
	keys, err := suSigning(t, s, tenant, id)
	if err != nil {
		t.Fatalf("signing keys of %s: %v", id, err)
	}
	if len(keys) != len(want) {
		t.Fatalf("subscription %s signs with %d keys, want %d", id, len(keys), len(want))
	}
	for i, w := range want {
		if string(keys[i]) != string(secrets.SigningKey(w)) {
			t.Fatalf("subscription %s: signing key %d is not the one expected", id, i)
		}
	}
}

// suSecretErased waits until subscription id has no secret any more.
func suSecretErased(t *testing.T, s *server.Server, tenant, id string) {
	t.Helper()
	testkit.Eventually(t, "the secret of "+id+" erased", func() bool {
		_, err := suSigning(t, s, tenant, id)
		return errors.Is(err, errs.ErrNotFound)
	})
}

// suGone waits until GET base/subscriptions/id answers 404.
func suGone(t *testing.T, base, id string) {
	t.Helper()
	testkit.Eventually(t, "subscription "+id+" deleted", func() bool {
		r := get(t, base+"/subscriptions/"+id)
		if r.Status != 404 && r.Status != 200 {
			t.Fatalf("GET subscription %s: %d %s", id, r.Status, r.Body)
		}
		return r.Status == 404 && r.errorCode(t) == "SUBSCRIPTION_NOT_FOUND"
	})
}

// suRejection waits for the outcome of command corr and returns its
// rejection code ("" when it was processed).
func suRejection(t *testing.T, base, corr string) string {
	t.Helper()
	var trace struct {
		Status    string `json:"status"`
		Rejection *struct {
			Code string `json:"code"`
		} `json:"rejection"`
	}
	testkit.Eventually(t, "the outcome of "+corr, func() bool {
		r := get(t, base+"/traces/"+corr)
		if r.Status != 200 {
			return false
		}
		_ = json.Unmarshal(r.Body, &trace)
		return trace.Status == "processed" || trace.Status == "rejected"
	})
	if trace.Rejection == nil {
		return ""
	}
	return trace.Rejection.Code
}

// suAllMessages returns the payload and headers of every message of every
// stream of the NATS server js talks to (the logs, and the buckets, which
// are streams too), each as one string.
func suAllMessages(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info := st.CachedInfo()
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("%s #%d: %v", name, seq, err)
			}
			hdr, _ := json.Marshal(m.Header)
			out = append(out, name+" "+m.Subject+" "+string(hdr)+" "+string(m.Data))
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
