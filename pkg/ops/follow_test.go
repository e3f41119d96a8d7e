package ops_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
)

// TestFollow: the one loop of a live stream reads first when asked, again
// every Every until Read says done; sends a heartbeat after Quiet, whose
// error ends it; and ends with UNAUTHENTICATED once the credential no
// longer holds, however busy it is.
func TestFollow(t *testing.T) {
	t.Parallel()
	cat, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	s := ops.New(ops.Config{Streams: ops.StreamConfig{Recheck: 20 * time.Millisecond}}, cat, ops.Ports{})
	holds := func() ops.Credential { return ops.Credential{} }

	t.Run("reads until done", func(t *testing.T) {
		t.Parallel()
		reads := 0
		err := s.Follow(context.Background(), holds, ops.Follower{ReadFirst: true, Every: 5 * time.Millisecond,
			Read: func(context.Context) (bool, bool, error) { reads++; return true, reads == 3, nil }})
		if err != nil || reads != 3 {
			t.Fatalf("Follow = %v after %d reads, want nil after 3", err, reads)
		}
	})
	t.Run("a heartbeat that fails ends it", func(t *testing.T) {
		t.Parallel()
		gone := errors.New("the reader left")
		beats := 0
		err := s.Follow(context.Background(), holds, ops.Follower{Quiet: 5 * time.Millisecond,
			Beat: func(context.Context) error {
				if beats++; beats == 2 {
					return gone
				}
				return nil
			}})
		if !errors.Is(err, gone) || beats != 2 {
			t.Fatalf("Follow = %v after %d beats", err, beats)
		}
	})
	t.Run("a credential that no longer holds ends it", func(t *testing.T) {
		t.Parallel()
		revoked := errs.New(errs.CodeUnauthenticated, "revoked")
		start := time.Now()
		err := s.Follow(context.Background(), func() ops.Credential {
			return ops.Credential{Check: func(context.Context) error {
				if time.Since(start) > 50*time.Millisecond {
					return revoked
				}
				return nil
			}}
		}, ops.Follower{Every: time.Millisecond, Read: func(context.Context) (bool, bool, error) { return true, false, nil }})
		if err != revoked {
			t.Fatalf("Follow = %v, want the credential's error", err)
		}
	})
	t.Run("its context ends it", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := s.Follow(ctx, holds, ops.Follower{}); err != nil {
			t.Fatalf("Follow = %v, want nil", err)
		}
	})
}
