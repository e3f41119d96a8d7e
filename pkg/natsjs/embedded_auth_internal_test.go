package natsjs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestOwnIdentityIsInProcessOnly: agentbus's own user works in-process
// only, so even its password (which never leaves memory) is refused on the
// client port; the administrator's works on the client port.
func TestOwnIdentityIsInProcessOnly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, _, unlock, auth, err := startEmbedded(ctx, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", RequireAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown(); unlock() }()
	if auth.self == "" || auth.admin == "" || auth.self == auth.admin {
		t.Fatalf("credentials %q / %q: want two different ones", auth.self, auth.admin)
	}
	for _, c := range []struct {
		what      string
		inProcess bool
		user, pw  string
		ok        bool
	}{
		{"own user in-process", true, selfUser, auth.self, true},
		{"own user on the client port", false, selfUser, auth.self, false},
		{"administrator on the client port", false, AdminUser, auth.admin, true},
	} {
		opts := []nats.Option{nats.Timeout(5 * time.Second)}
		if c.inProcess {
			opts = append(opts, nats.InProcessServer(ns))
		}
		if c.user != "" {
			opts = append(opts, nats.UserInfo(c.user, c.pw))
		}
		nc, err := nats.Connect(ns.ClientURL(), opts...)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.what, err)
		case !c.ok && !errors.Is(err, nats.ErrAuthorization):
			t.Errorf("%s: %v, want an authorization violation", c.what, err)
		}
		if nc != nil {
			nc.Close()
		}
	}
}
