package send_test

import (
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/webhook/send"
)

// TestBackoffNext: the retry and dead-letter policy, a pure function of
// the attempt: 2xx delivers, 410 disables, anything else (no answer, a
// redirect, 4xx, 5xx) is retried while the schedule lasts — after the
// schedule's wait, its jitter drawn from the sample given, held back by a
// Retry-After — and dead-lettered after the last retry.
func TestBackoffNext(t *testing.T) {
	t.Parallel()
	b := send.Backoff{Schedule: []time.Duration{time.Second, time.Minute}, Jitter: 0.5, MaxRetryAfter: time.Hour}
	tests := []struct {
		name       string
		attempt    int
		status     int
		retryAfter time.Duration
		rnd        float64
		step       send.Step
		wait       time.Duration
	}{
		{"200 first", 1, 200, 0, 0.5, send.StepDelivered, 0},
		{"204 after retries", 3, 204, 0, 0.5, send.StepDelivered, 0},
		{"299", 1, 299, 0, 0.5, send.StepDelivered, 0},
		{"410", 1, 410, 0, 0.5, send.StepDisable, 0},
		{"410 past the schedule", 9, 410, 0, 0.5, send.StepDisable, 0},
		{"no answer", 1, 0, 0, 0.5, send.StepRetry, time.Second},
		{"500, jitter down", 1, 500, 0, 0, send.StepRetry, 500 * time.Millisecond},
		{"500, jitter up", 2, 500, 0, 1, send.StepRetry, 90 * time.Second},
		{"302 is a failure", 1, 302, 0, 0.5, send.StepRetry, time.Second},
		{"199 is a failure", 1, 199, 0, 0.5, send.StepRetry, time.Second},
		{"404", 2, 404, 0, 0.5, send.StepRetry, time.Minute},
		{"429 with Retry-After", 1, 429, 30 * time.Second, 0.5, send.StepRetry, 30 * time.Second},
		{"503 with Retry-After past its bound", 1, 503, 5 * time.Hour, 0.5, send.StepRetry, time.Hour},
		{"last retry used", 3, 500, 0, 0.5, send.StepDeadLetter, 0},
		{"last retry used, Retry-After", 3, 429, time.Second, 0.5, send.StepDeadLetter, 0},
		{"no attempt", 0, 500, 0, 0.5, send.StepDeadLetter, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			step, wait := b.Next(tt.attempt, tt.status, tt.retryAfter, tt.rnd)
			if step != tt.step || wait != tt.wait {
				t.Errorf("Next(%d, %d, %v, %v) = %v, %v; want %v, %v", tt.attempt, tt.status, tt.retryAfter, tt.rnd, step, wait, tt.step, tt.wait)
			}
			if again, againWait := b.Next(tt.attempt, tt.status, tt.retryAfter, tt.rnd); again != step || againWait != wait {
				t.Errorf("a second call gives %v, %v: not a function of its arguments", again, againWait)
			}
		})
	}
}
