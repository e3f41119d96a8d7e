package natsjs

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/nats-io/nats.go"
)

// TestRetryTriesGrow: with first set, each try gets twice the last, up to
// try; without it, every try gets try.
func TestRetryTriesGrow(t *testing.T) {
	for _, c := range []struct {
		r    retry
		want []time.Duration
	}{
		{retry{first: time.Second, try: 5 * time.Second}, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{retry{try: 5 * time.Second}, []time.Duration{5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}},
	} {
		var got []time.Duration
		c.r.retryable = func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }
		_ = c.r.run(context.Background(), func(try time.Duration) error {
			got = append(got, try)
			if len(got) == len(c.want) {
				return errors.New("done")
			}
			return context.DeadlineExceeded
		})
		if !slices.Equal(got, c.want[:len(got)]) || len(got) != len(c.want) {
			t.Errorf("%+v: tries %v, want %v", c.r, got, c.want)
		}
	}
}

// TestNotYet: the errors a later start may not meet, and not the ones
// for the operator to fix.
func TestNotYet(t *testing.T) {
	for _, err := range []error{nats.ErrNoServers, context.DeadlineExceeded, errs.ErrUnavailable, nats.ErrConnectionClosed} {
		if !NotYet(err) {
			t.Errorf("NotYet(%v) = false", err)
		}
	}
	for _, err := range []error{ErrCredentialsRefused, errors.New("nats-server 2.9.0 is too old")} {
		if NotYet(err) {
			t.Errorf("NotYet(%v) = true", err)
		}
	}
}
