package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// regCatalogs loads the example domain and the example agent's catalogue,
// whose ChargeCustomer has no processor inside agentbus (agents take it).
func regCatalogs(c *settings.Config) {
	c.Catalog.Dirs = []string{"../../config/catalog", "../../cmd/example-agent/catalog"}
}

// regOn returns a config mutation pointing agentbus at url.
func regOn(url string) func(*settings.Config) {
	return func(c *settings.Config) { c.NATS.URL = url }
}

// startOnNATS starts agentbus with the registry catalogues on a NATS
// server of its own, and returns it with a JetStream client of that server.
func startOnNATS(t *testing.T, mutate ...func(*settings.Config)) (*server.Server, jetstream.JetStream) {
	t.Helper()
	natsURL := testkit.NATSServer(t)
	return start(t, append([]func(*settings.Config){regCatalogs, regOn(natsURL)}, mutate...)...), testkit.JetStream(t, natsURL)
}

// chargeCustomer is a ChargeCustomer command envelope.
func chargeCustomer(orderID string) map[string]any {
	return command("ChargeCustomer", "charge-customer/1.0", map[string]any{"customerId": "ada", "orderId": orderID, "amount": 100})
}

// regConsumer returns the info of a consumer on the command stream, or nil.
func regConsumer(t *testing.T, js jetstream.JetStream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	return testkit.ConsumerInfo(t, js, "AGENTBUS_COMMANDS", name)
}

// regTimestamp fails unless rec[field] is an RFC 3339 timestamp string,
// and returns it parsed.
func regTimestamp(t *testing.T, what string, rec map[string]any, field string) time.Time {
	t.Helper()
	s, ok := rec[field].(string)
	if !ok {
		t.Fatalf("%s %s is %#v, want an RFC 3339 timestamp string", what, field, rec[field])
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s %s %q: %v", what, field, s, err)
	}
	return ts
}

// consumeAgent runs fn on every command the consumer of agent id (single
// tenant) delivers, as the agent's program would, until the test ends.
func consumeAgent(t *testing.T, js jetstream.JetStream, id string, fn jetstream.MessageHandler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, "AGENTBUS_COMMANDS", "agent_default_"+id)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(fn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
}
