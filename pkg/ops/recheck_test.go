package ops_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
)

// TestHold: a Hold context ends, its cause UNAUTHENTICATED, once its
// credential's check fails or its expiry passes; a check that fails
// otherwise (a store away), or a credential that holds, ends nothing;
// releasing it ends it without an error.
func TestHold(t *testing.T) {
	t.Parallel()
	cat, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	s := ops.New(ops.Config{Streams: ops.StreamConfig{Recheck: 20 * time.Millisecond}}, cat, ops.Ports{})
	unauthenticated := errs.New(errs.CodeUnauthenticated, "revoked")
	within := func(t *testing.T, ctx context.Context) {
		t.Helper()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the stream goes on")
		}
	}

	t.Run("revoked", func(t *testing.T) {
		t.Parallel()
		var revoked atomic.Bool
		var checks atomic.Int32
		ctx, release := s.Hold(context.Background(), func() ops.Credential {
			return ops.Credential{Check: func(context.Context) error {
				if checks.Add(1); revoked.Load() {
					return unauthenticated
				}
				return nil
			}}
		})
		defer release()
		for checks.Load() < 3 { // checked again and again while it holds
			time.Sleep(5 * time.Millisecond)
		}
		if ctx.Err() != nil {
			t.Fatal("ended while the credential holds")
		}
		revoked.Store(true)
		within(t, ctx)
		if err := ops.Ended(ctx); err != unauthenticated {
			t.Fatalf("Ended = %v", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		t.Parallel()
		slow := ops.New(ops.Config{}, cat, ops.Ports{}) // rechecks every 15 s
		until := time.Now().Add(50 * time.Millisecond)
		ctx, release := slow.Hold(context.Background(), func() ops.Credential { return ops.Credential{Until: until} })
		defer release()
		within(t, ctx)
		if time.Now().Before(until) {
			t.Fatal("ended before the expiry")
		}
		if err := ops.Ended(ctx); errs.CodeOf(err) != errs.CodeUnauthenticated {
			t.Fatalf("Ended = %v", err)
		}
	})
	t.Run("store away", func(t *testing.T) {
		t.Parallel()
		var checks atomic.Int32
		ctx, release := s.Hold(context.Background(), func() ops.Credential {
			return ops.Credential{Check: func(context.Context) error { checks.Add(1); return errs.Unavailable("the key store is away") }}
		})
		for checks.Load() < 3 {
			time.Sleep(5 * time.Millisecond)
		}
		if ctx.Err() != nil {
			t.Fatal("ended for a store that is away")
		}
		release()
		if ctx.Err() == nil || ops.Ended(ctx) != nil {
			t.Fatalf("released: err %v, Ended %v", ctx.Err(), ops.Ended(ctx))
		}
	})
}
