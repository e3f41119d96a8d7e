package ops

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentbus/agentbus/pkg/decide"
)

// TestRecordWithSecretIsTheRecord: the answer that shows a generated
// secret is the subscription record, member for member, plus
// webhook.secret.
func TestRecordWithSecretIsTheRecord(t *testing.T) {
	if a, b := reflect.TypeFor[decide.Subscription]().NumField(), reflect.TypeFor[withSecret]().NumField(); a != b {
		t.Fatalf("the record has %d fields, the answer with a secret %d", a, b)
	}
	rec := decide.Subscription{ID: "s", ServiceID: "svc", Webhook: decide.Webhook{URL: "https://h.test/x"},
		Filter: &decide.Filter{Types: []string{"A"}}, Status: decide.SubscriptionFailing, StatusReason: "r",
		CreatedAt: "2026-01-01T00:00:00Z", UpdatedAt: "2026-01-02T00:00:00Z"}
	want, _ := json.Marshal(rec)
	raw, _ := json.Marshal(recordWithSecret(rec, "whsec_x"))
	var got map[string]any
	_ = json.Unmarshal(raw, &got)
	hook := got["webhook"].(map[string]any)
	if hook["secret"] != "whsec_x" {
		t.Fatalf("no secret: %s", raw)
	}
	delete(hook, "secret")
	if again, _ := json.Marshal(got); string(again) != string(mustSorted(t, want)) {
		t.Fatalf("the answer %s is not the record %s", raw, want)
	}
}

// mustSorted re-marshals a JSON object with its members sorted, as a
// map marshals.
func mustSorted(t *testing.T, b []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(m)
	return out
}
