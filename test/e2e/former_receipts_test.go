package e2e_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// formerRemoved is what agentbus logs when it removed the receipts bucket
// and consumers of an earlier version.
const formerRemoved = "removed the receipts bucket and consumers of an earlier version"

// noFormerReceipts fails t when NATS holds the receipts bucket
// (AGENTBUS_RECEIPTS, stream KV_AGENTBUS_RECEIPTS) or a consumer named
// receipts on the command or event stream.
func noFormerReceipts(t *testing.T, js jetstream.JetStream, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.KeyValue(ctx, "AGENTBUS_RECEIPTS"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("%s, the receipts bucket: %v; want none", when, err)
	}
	if _, err := js.Stream(ctx, "KV_AGENTBUS_RECEIPTS"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("%s, the receipts bucket's stream: %v; want none", when, err)
	}
	for _, stream := range []string{"AGENTBUS_COMMANDS", "AGENTBUS_EVENTS"} {
		if ci := testkit.ConsumerInfo(t, js, stream, "receipts"); ci != nil {
			t.Errorf("%s, a receipts consumer on %s: %+v; want none", when, stream, ci.Config)
		}
	}
}

// TestFormerReceiptsRemovedAtStart: agentbus keeps no receipt in NATS (the
// correlation index is each replica's history on its disk), so it declares
// no receipts bucket and no receipts consumers. Started on a NATS that
// holds an earlier version's (the bucket AGENTBUS_RECEIPTS and a durable
// consumer "receipts" on the command and on the event stream), it removes
// them, says so once in its log, and answers for the commands stored
// before from its history. A start on a NATS without them removes and
// logs nothing.
func TestFormerReceiptsRemovedAtStart(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	js := testkit.JetStream(t, natsURL)
	data := t.TempDir()
	logs := &testkit.LockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	startLogged := func(mutate ...func(*settings.Config)) *server.Server {
		t.Helper()
		mutate = append([]func(*settings.Config){testkit.NoNATSPort, regOn(natsURL), func(c *settings.Config) { c.Data = data }}, mutate...)
		return testkit.AgentbusWithLogger(t, log, mutate...)
	}
	stop := func(s *server.Server) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}

	s := startLogged()
	noFormerReceipts(t, js, "after a first start")
	corr := submitCommand(t, s.URL, placeOrder("o-former"))
	eventsOf(t, s.URL, corr, 1)
	stop(s)
	if lines := logs.Lines(formerRemoved); len(lines) != 0 {
		t.Fatalf("a start on a NATS without a receipts bucket logged a removal: %q", lines)
	}

	// What an earlier version declared, with a receipt in the bucket.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "AGENTBUS_RECEIPTS", TTL: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "default."+corr, []byte(`{"correlationId":"`+corr+`","tenant":"default","status":"accepted"}`)); err != nil {
		t.Fatal(err)
	}
	for stream, filter := range map[string]string{"AGENTBUS_COMMANDS": "agentbus.cmd.>", "AGENTBUS_EVENTS": "agentbus.evt.>"} {
		if _, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: "receipts", FilterSubjects: []string{filter}, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: 5 * time.Second, MaxAckPending: 4096,
		}); err != nil {
			t.Fatalf("the former receipts consumer on %s: %v", stream, err)
		}
	}

	s = startLogged()
	noFormerReceipts(t, js, "after a start on an earlier version's NATS")
	lines := logs.Lines(formerRemoved)
	if len(lines) != 1 {
		t.Fatalf("%d lines saying the former receipts were removed, want 1: %q", len(lines), lines)
	}
	for _, removed := range []string{"AGENTBUS_RECEIPTS", "AGENTBUS_COMMANDS/receipts", "AGENTBUS_EVENTS/receipts"} {
		if !strings.Contains(lines[0], removed) {
			t.Errorf("the removal's log line does not name %s: %s", removed, lines[0])
		}
	}
	if ev := eventsOf(t, s.URL, corr, 1)[0]; ev["type"] != "OrderPlaced" {
		t.Errorf("the command stored before: event %v", ev)
	}
	if r := get(t, s.URL+"/traces/"+corr); r.Status != 200 || !strings.Contains(string(r.Body), `"processed"`) {
		t.Errorf("the trace of the command stored before: %d %s; want it processed", r.Status, r.Body)
	}
	stop(s)

	if lines := logs.Lines(receiptTTLUnused); len(lines) != 0 {
		t.Errorf("starts without streams.receiptTTL warned of it: %q", lines)
	}

	// The third start with a configuration of an earlier version: it
	// still sets streams.receiptTTL, which loads and is warned of.
	s = startLogged(func(c *settings.Config) { c.Streams.ReceiptTTL = settings.Duration(24 * time.Hour) })
	noFormerReceipts(t, js, "after a start once they were removed")
	if lines := logs.Lines(formerRemoved); len(lines) != 1 {
		t.Errorf("%d lines saying the former receipts were removed after three starts, want 1: %q", len(lines), lines)
	}
	if lines := logs.Lines(receiptTTLUnused); len(lines) != 1 {
		t.Errorf("%d warnings that streams.receiptTTL is no longer used, want 1: %q", len(lines), lines)
	}
}

// receiptTTLUnused is what agentbus warns when its configuration sets
// streams.receiptTTL.
const receiptTTLUnused = "streams.receiptTTL is no longer used"
