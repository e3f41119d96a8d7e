package decide_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/decide"
)

func TestWebhookURLProblem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url string
		ok  bool
	}{
		{"https://hooks.example.com/agentbus", true},
		{"http://127.0.0.1:8080/hook?x=1", true},
		{"HTTPS://Hooks.Example.com/", true},
		{"http://[::1]:9/x", true},
		{"ftp://hooks.example.com/", false},
		{"//hooks.example.com/x", false},
		{"/relative", false},
		{"https:///no-host", false},
		{"https://user@hooks.example.com/", false},
		{"https://user:pw@hooks.example.com/", false},
		{"https://hooks.example.com/#frag", false},
		{"https://hooks.example.com/a b", false},
		{"https://hooks.example.com/\x00", false},
		{"https://hooks.example.com/" + strings.Repeat("a", 2048), false},
		{"", false},
	}
	for _, tt := range tests {
		if why := decide.WebhookURLProblem(tt.url); (why == "") != tt.ok {
			t.Errorf("%.60q: %q, want ok %v", tt.url, why, tt.ok)
		}
	}
}

// TestFoldSubscription: a subscription's events fold into its record; an
// event the fold cannot trust (another id, a bad URL or type, data that
// does not decode) is refused, and changes to no subscription change
// nothing.
func TestFoldSubscription(t *testing.T) {
	t.Parallel()
	created := `{"id":"s1","serviceId":"svc","webhook":{"url":"https://h.example/x"},"filter":{"types":["A"]},"status":"active","createdAt":"2026-01-01T00:00:00Z"}`
	change := func(status, reason string) string {
		b, _ := json.Marshal(decide.SubscriptionChange{ID: "s1", At: "2026-01-02T00:00:00Z", Status: status, Reason: reason})
		return string(b)
	}
	steps := []struct {
		typ, data string
		ok        bool
		status    string // "" = no record
		reason    string
	}{
		{decide.TypeSubscriptionDisabled, change("disabled", "gone"), true, "", ""}, // no subscription yet
		{decide.TypeSubscriptionCreated, strings.Replace(created, `"s1"`, `"s2"`, 1), false, "", ""},
		{decide.TypeSubscriptionCreated, strings.Replace(created, "https://h.example/x", "ftp://h.example/x", 1), false, "", ""},
		{decide.TypeSubscriptionCreated, strings.Replace(created, `["A"]`, `["a.>"]`, 1), false, "", ""},
		{decide.TypeSubscriptionCreated, `{"id":`, false, "", ""},
		{decide.TypeSubscriptionCreated, created, true, "active", ""},
		{decide.TypeSubscriptionFailing, change("failing", "dead-lettered"), true, "failing", "dead-lettered"},
		{decide.TypeSubscriptionSecretRotated, change("failing", ""), true, "failing", "dead-lettered"},
		{decide.TypeSubscriptionDisabled, strings.Replace(change("disabled", "gone"), `"s1"`, `"s2"`, 1), false, "failing", "dead-lettered"},
		{decide.TypeSubscriptionDisabled, change("disabled", "gone"), true, "disabled", "gone"},
		{decide.TypeSubscriptionEnabled, change("active", ""), true, "active", ""},
		{"SomethingElse", `{}`, true, "active", ""},
		{decide.TypeSubscriptionDeleted, `{"id":"s1","at":"2026-01-03T00:00:00Z"}`, true, "", ""},
	}
	var cur *decide.Subscription
	for i, st := range steps {
		next, ok := decide.FoldSubscription(cur, "s1", st.typ, json.RawMessage(st.data))
		if ok != st.ok {
			t.Fatalf("step %d (%s): ok %v", i, st.typ, ok)
		}
		cur = next
		switch {
		case st.status == "" && cur != nil:
			t.Fatalf("step %d (%s): record %+v, want none", i, st.typ, cur)
		case st.status != "" && (cur == nil || cur.Status != st.status || cur.StatusReason != st.reason):
			t.Fatalf("step %d (%s): record %+v, want %s (%q)", i, st.typ, cur, st.status, st.reason)
		}
	}
}

func TestSubscriptionDelivers(t *testing.T) {
	t.Parallel()
	filtered := decide.Subscription{Status: decide.SubscriptionActive, Filter: &decide.Filter{Types: []string{"A", "B"}}}
	every := decide.Subscription{Status: decide.SubscriptionFailing}
	disabled := decide.Subscription{Status: decide.SubscriptionDisabled}
	for _, tt := range []struct {
		name string
		sub  decide.Subscription
		typ  string
		want bool
	}{
		{"listed", filtered, "B", true},
		{"not listed", filtered, "C", false},
		{"no filter", every, "Anything", true},
		{"disabled", disabled, "Anything", false},
	} {
		if got := tt.sub.Delivers(tt.typ); got != tt.want {
			t.Errorf("%s: Delivers(%s) = %v", tt.name, tt.typ, got)
		}
	}
}
