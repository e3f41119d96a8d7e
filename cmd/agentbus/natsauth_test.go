package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAuthenticatedServeSecuresNATS: serve --auth bearer keeps its
// embedded NATS port closed to clients without credentials, admits the
// user of its config file with that user's rights only, and still lets the
// admin commands of the same data dir manage keys while it runs (through
// the administrator's credential it keeps there, removed when it stops).
func TestAuthenticatedServeSecuresNATS(t *testing.T) {
	dir := t.TempDir()
	natsAddr := testkit.FreeAddr(t)
	cfgFile := filepath.Join(t.TempDir(), "agentbus.yaml")
	if err := os.WriteFile(cfgFile, []byte(`nats:
  embedded:
    users:
      - user: shipping
        password: shipping-password-0123
`), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--config", cfgFile, "--data", dir, "--nats-listen", natsAddr}
	httpAddr, serveLog, stop := startServe(t, append(common, "--auth", "bearer")...)
	if !strings.Contains(serveLog.String(), "embedded NATS requires credentials on its client port") {
		t.Errorf("the start log does not say the NATS port requires credentials:\n%s", serveLog.String())
	}

	// No credentials, or wrong ones: refused.
	for name, opts := range map[string][]nats.Option{
		"none":           nil,
		"wrong password": {nats.UserInfo("shipping", "not-the-password")},
	} {
		if nc, err := nats.Connect("nats://"+natsAddr, opts...); !errors.Is(err, nats.ErrAuthorization) {
			if nc != nil {
				nc.Close()
			}
			t.Errorf("credentials %s: %v, want an authorization violation", name, err)
		}
	}

	// The configured user: its tenant's commands, not the key bucket.
	nc, err := nats.Connect("nats://"+natsAddr, nats.UserInfo("shipping", "shipping-password-0123"), nats.CustomInboxPrefix("_INBOX.shipping"))
	if err != nil {
		t.Fatalf("the configured user: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "agentbus.cmd.default.ShipOrder", []byte(`{}`)); err != nil {
		t.Errorf("the user publishes a command of its tenant: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	if _, err := js.KeyValue(short, natsjs.KeysBucket("agentbus")); err == nil {
		t.Error("the user opened the key bucket")
	}

	// The admin commands of serve's data dir reach it, and the key they
	// create authenticates HTTP.
	var out, errb bytes.Buffer
	if err := run(context.Background(), append([]string{"keys", "create", "--scope", "read"}, common...), &out, &errb); err != nil {
		t.Fatalf("keys create: %v\n%s", err, errb.String())
	}
	key := strings.TrimSpace(out.String())
	req, _ := http.NewRequest(http.MethodGet, "http://"+httpAddr+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	testkit.Eventually(t, "the new key accepted", func() bool {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})

	// Another data dir has no credential: refused, naming where it is kept,
	// instead of opening an empty store.
	other := []string{"keys", "list", "--config", cfgFile, "--data", t.TempDir(), "--nats-listen", natsAddr}
	err = run(context.Background(), other, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "requires credentials") || !strings.Contains(err.Error(), natsjs.AdminFile) {
		t.Errorf("keys list with another --data: %v", err)
	}

	if err := stop(); err != nil {
		t.Errorf("serve: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, natsjs.AdminFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the admin credential after serve stopped: %v, want removed", err)
	}
}
