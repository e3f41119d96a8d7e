package settings_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestPushRecheck: push.recheck, how often every live stream checks its
// credential again, is 15s by default and may be 100ms to 15s, no more.
func TestPushRecheck(t *testing.T) {
	t.Parallel()
	if d := settings.Default().Push.Recheck.D(); d != 15*time.Second {
		t.Fatalf("default push.recheck %s, want 15s", d)
	}
	for _, c := range []struct {
		d   time.Duration
		bad bool
	}{{100 * time.Millisecond, false}, {15 * time.Second, false}, {0, true}, {99 * time.Millisecond, true}, {16 * time.Second, true}} {
		cfg := settings.Default()
		cfg.Push.Recheck = settings.Duration(c.d)
		err := cfg.Validate()
		if (err != nil) != c.bad || err != nil && !strings.Contains(err.Error(), "push.recheck") {
			t.Errorf("push.recheck %s: %v", c.d, err)
		}
	}
}
