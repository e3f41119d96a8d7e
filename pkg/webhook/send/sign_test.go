package send_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/webhook/send"
)

// TestSignatureVector: the Standard Webhooks specification's own example
// (secret, message id, timestamp, payload → signature).
func TestSignatureVector(t *testing.T) {
	t.Parallel()
	key, err := send.Key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := send.Signature([][]byte{key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	two := send.Signature([][]byte{key, []byte("old")}, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if len(two) <= len(got)+1 || two[:len(got)+1] != got+" " {
		t.Fatalf("two keys: %s", two)
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "whsec_", "whsec_not base64!"} {
		if _, err := send.Key(bad); err == nil {
			t.Errorf("Key(%q) accepted", bad)
		}
	}
	if k, err := send.Key("plain"); err != nil || string(k) != "plain" {
		t.Errorf("a secret without the prefix is its bytes: %q %v", k, err)
	}
}

func TestBackoffWait(t *testing.T) {
	t.Parallel()
	b := send.Backoff{Schedule: []time.Duration{5 * time.Second, time.Minute}, Jitter: 0.2, MaxRetryAfter: 10 * time.Minute}
	tests := []struct {
		name       string
		attempt    int
		retryAfter time.Duration
		rnd        float64
		want       time.Duration
		retry      bool
	}{
		{"first retry, no jitter drawn", 1, 0, 0.5, 5 * time.Second, true},
		{"jitter down", 1, 0, 0, 4 * time.Second, true},
		{"jitter up", 2, 0, 1, 72 * time.Second, true},
		{"Retry-After longer than the schedule", 1, 90 * time.Second, 0.5, 90 * time.Second, true},
		{"Retry-After shorter than the schedule", 2, time.Second, 0.5, time.Minute, true},
		{"Retry-After past its bound", 1, 5 * time.Hour, 0.5, 10 * time.Minute, true},
		{"no retry left", 3, 0, 0.5, 0, false},
		{"no attempt", 0, 0, 0.5, 0, false},
	}
	for _, tt := range tests {
		got, retry := b.Wait(tt.attempt, tt.retryAfter, tt.rnd)
		if got != tt.want || retry != tt.retry {
			t.Errorf("%s: %v %v, want %v %v", tt.name, got, retry, tt.want, tt.retry)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	h := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
	tests := []struct {
		status int
		h      http.Header
		want   time.Duration
	}{
		{429, h("7"), 7 * time.Second},
		{503, h(now.Add(time.Minute).Format(http.TimeFormat)), time.Minute},
		{500, h("7"), 0},
		{429, h("-3"), 0},
		{429, h("soon"), 0},
		{429, http.Header{}, 0},
		{503, h(now.Add(-time.Minute).Format(http.TimeFormat)), 0},
	}
	for _, tt := range tests {
		if got := send.RetryAfter(tt.status, tt.h, now); got != tt.want {
			t.Errorf("%d %v: %v, want %v", tt.status, tt.h, got, tt.want)
		}
	}
}
