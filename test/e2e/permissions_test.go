package e2e_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestDocumentedPermissionsSuffice runs agentbus as a NATS user holding
// exactly the permissions deploy/README.md lists, and checks the whole
// pipeline on it: a command processed into its event (append, receipt,
// acks), an agent registered (its consumer created) and a command the
// agent never acks rejected, its advisory handled and acked.
func TestDocumentedPermissionsSuffice(t *testing.T) {
	t.Parallel()
	pub, sub := documentedPermissions(t)
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
	s := start(t, regCatalogs, regOn("nats://agentbus:agentbus-pw@"+host))
	js := testkit.JetStream(t, "nats://admin:admin-pw@"+host)

	corr := submitCommand(t, s.URL, placeOrder("perm-1"))
	if evs := eventsOf(t, s.URL, corr, 1); evs[0]["type"] != "OrderPlaced" {
		t.Fatalf("command on the restricted user: %v", evs[0])
	}

	registerChargeAgent(t, s.URL, "perm-agent")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, "AGENTBUS_COMMANDS", "agent_default_perm-agent")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { _ = m.Nak() })
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	bad := submitCommand(t, s.URL, chargeCustomer("perm-2"))
	if evs := eventsOf(t, s.URL, bad, 1); evs[0]["type"] != "CommandRejected" {
		t.Fatalf("undelivered command on the restricted user: %v", evs[0])
	}
	testkit.Eventually(t, "the advisory acked", func() bool {
		st, err := js.Stream(ctx, "AGENTBUS_UNDELIVERED")
		return err == nil && st.CachedInfo().State.Msgs == 0 && st.CachedInfo().State.LastSeq == 1
	})
}
