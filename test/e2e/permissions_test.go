package e2e_test

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// documentedPermissions reads the NATS permissions deploy/README.md lists
// for agentbus's user: the backquoted subjects of its "publish" and
// "subscribe" items.
func documentedPermissions(t *testing.T) (pub, sub []string) {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "A NATS user with these permissions")
	end := strings.Index(doc, "## A three-node cluster")
	if start < 0 || end < start {
		t.Fatal("deploy/README.md: the permissions list is not where this test looks for it")
	}
	// Items may wrap: an item runs to the next one; its subjects are the
	// quoted ones before the colon that ends them.
	quoted := regexp.MustCompile("`([^`]+)`")
	for _, item := range strings.Split(doc[start:end], "\n  - ")[1:] {
		verb, rest, _ := strings.Cut(strings.Join(strings.Fields(item), " "), " ")
		subjects, _, ok := strings.Cut(rest, "`:")
		if !ok || (verb != "publish" && verb != "subscribe") {
			continue
		}
		for _, q := range quoted.FindAllStringSubmatch(subjects+"`", -1) {
			if verb == "publish" {
				pub = append(pub, q[1])
			} else {
				sub = append(sub, q[1])
			}
		}
	}
	if !slices.Contains(pub, "$JS.API.>") || !slices.Contains(sub, "_INBOX.>") {
		t.Fatalf("deploy/README.md: read publish %v, subscribe %v", pub, sub)
	}
	return pub, sub
}

// agentbusAsUser runs agentbus, with bearer authentication, on a NATS
// server as a user allowed to publish pub and subscribe sub; it returns
// agentbus, its log, and JetStream as the server's admin.
func agentbusAsUser(t *testing.T, pub, sub []string) (*server.Server, *testkit.LockedBuffer, jetstream.JetStream) {
	t.Helper()
	url := testkit.NATSServer(t, func(o *natsserver.Options) {
		o.Users = []*natsserver.User{
			{Username: "agentbus", Password: "agentbus-pw", Permissions: &natsserver.Permissions{
				Publish:   &natsserver.SubjectPermission{Allow: pub},
				Subscribe: &natsserver.SubjectPermission{Allow: sub},
			}},
			{Username: "admin", Password: "admin-pw"},
		}
	})
	host := strings.TrimPrefix(url, "nats://")
	logs := &testkit.LockedBuffer{}
	s := testkit.AgentbusWithLogger(t, slog.New(slog.NewTextHandler(logs, nil)), testkit.NoNATSPort, regCatalogs,
		regOn("nats://agentbus:agentbus-pw@"+host), func(c *settings.Config) {
			c.Auth.Type, c.Auth.BootstrapKey, c.Auth.TokenSigningKey = "bearer", auBootstrap, auSigningKey
			c.Limits.Rate = settings.Rate{}
		})
	return s, logs, testkit.JetStream(t, "nats://admin:admin-pw@"+host)
}

// TestDocumentedPermissionsSuffice runs agentbus, with bearer
// authentication, as a NATS user holding exactly the permissions
// deploy/README.md lists, and uses everything on it: an API key created and
// watched (the key bucket), a command processed into its event (append,
// receipt, acks), an agent registered (its consumer created), and a command
// the agent never acks rejected, its advisory acked. NATS refuses nothing
// meanwhile: agentbus logs every refusal as "nats error". Dropping any one
// listed subject fails it (checked by hand, one at a time, when the list
// was written), except the two `$JS.FC.…` ones: a key-value watch answers
// flow control only when much is streamed to it at once.
func TestDocumentedPermissionsSuffice(t *testing.T) {
	t.Parallel()
	pub, sub := documentedPermissions(t)
	s, logs, js := agentbusAsUser(t, pub, sub)

	// A key, created on agentbus's own connection as `agentbus keys` does
	// with the same user; the server's key watch must see it.
	key, _ := auMint(t, auKeys(t, s), "default", auth.ScopeRead, auth.ScopeWrite)
	var corr string
	testkit.Eventually(t, "the new key accepted", func() bool {
		r := auCall(t, "bearer", "POST", s.URL+"/commands", key, plJSON(t, placeOrder("perm-1")))
		if r.Status == 202 {
			corr = r.JSON(t)["id"].(string)
		}
		return r.Status == 202
	})
	if evs := eventsOfAs(t, s.URL, key, corr, 1); evs[0]["type"] != "OrderPlaced" {
		t.Fatalf("command on the restricted user: %v", evs[0])
	}

	auExpect(t, "register", auCall(t, "bearer", "POST", s.URL+"/agents", key,
		plJSON(t, map[string]any{"id": "perm-agent", "name": "Perm", "accepts": []string{"ChargeCustomer"}})), 201, "")
	consumeAgent(t, js, "perm-agent", func(m jetstream.Msg) { _ = m.Nak() })
	bad := postAs(t, s.URL+"/commands", key, chargeCustomer("perm-2"))
	if evs := eventsOfAs(t, s.URL, key, bad, 1); evs[0]["type"] != "CommandRejected" {
		t.Fatalf("undelivered command on the restricted user: %v", evs[0])
	}
	testkit.Eventually(t, "the advisory acked", func() bool {
		st := testkit.StreamState(t, js, "AGENTBUS_UNDELIVERED")
		return st.Msgs == 0 && st.LastSeq == 1
	})
	// Every delivery of agentbus's own consumers acked.
	testkit.WaitIdle(t, js, testkit.PipelineConsumers("AGENTBUS_UNDELIVERED/undelivered", "AGENTBUS_EVENTS/control", "AGENTBUS_EVENTS/subscriptions")...)
	if refused := logs.Lines("nats error"); len(refused) > 0 {
		t.Fatalf("NATS refused agentbus %d times, e.g. %s", len(refused), refused[0])
	}
}

// TestWithoutTheStoredWordAgentbusStillWorks: a user that may not
// subscribe the server's word of what is stored (agentbus.stored.>, as
// before an upgrade gave it) still has its commands processed and their
// events read, by reading the logs, and the log names the refused subject
// (deploy/README.md, "Upgrading to the whole-message word").
func TestWithoutTheStoredWordAgentbusStillWorks(t *testing.T) {
	t.Parallel()
	pub, sub := documentedPermissions(t)
	if !slices.Contains(sub, "agentbus.stored.>") {
		t.Fatalf("deploy/README.md no longer lists subscribe agentbus.stored.>: %v", sub)
	}
	sub = slices.DeleteFunc(sub, func(s string) bool { return s == "agentbus.stored.>" })
	s, logs, _ := agentbusAsUser(t, pub, sub)
	key, _ := auMint(t, auKeys(t, s), "default", auth.ScopeRead, auth.ScopeWrite)
	for i := range 3 {
		var corr string
		testkit.Eventually(t, "the command accepted", func() bool {
			r := auCall(t, "bearer", "POST", s.URL+"/commands", key, plJSON(t, placeOrder(fmt.Sprintf("no-word-%d", i))))
			if r.Status == 202 {
				corr = r.JSON(t)["id"].(string)
			}
			return r.Status == 202
		})
		if evs := eventsOfAs(t, s.URL, key, corr, 1); evs[0]["type"] != "OrderPlaced" {
			t.Fatalf("command %d without the word: %v", i, evs[0])
		}
	}
	testkit.Eventually(t, "the refusal logged", func() bool {
		for _, l := range logs.Lines("nats error") {
			if strings.Contains(l, "agentbus.stored.") {
				return true
			}
		}
		return false
	})
}

// TestStreamsSetBackByAnOlderReplica: while an older replica runs, the
// streams are as it applied them: the event stream republishes headers
// only and the command stream nothing. Commands are still processed and
// their events served, from the logs (deploy/README.md, "Upgrading to the
// whole-message word").
func TestStreamsSetBackByAnOlderReplica(t *testing.T) {
	t.Parallel()
	s := start(t)
	ctx := plCtx(t)
	for name, rp := range map[string]*jetstream.RePublish{
		plEvents:   {Source: "agentbus.evt.>", Destination: "agentbus.stored.evt.>", HeadersOnly: true},
		plCommands: nil,
	} {
		st, err := s.Conn.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.RePublish = rp
		if _, err := s.Conn.JS.UpdateStream(ctx, cfg); err != nil {
			t.Fatalf("set %s back: %v", name, err)
		}
	}
	for i := range 3 {
		corr := submitCommand(t, s.URL, placeOrder(fmt.Sprintf("set-back-%d", i)))
		if evs := eventsOf(t, s.URL, corr, 1); evs[0]["type"] != "OrderPlaced" {
			t.Fatalf("command %d with the streams set back: %v", i, evs[0])
		}
	}
}
