// Package cluster_test runs agentbus the way operators do
// (deploy/README.md): a three-node JetStream cluster, R3 streams and two
// agentbus replicas sharing it, then kills a node under load.
//
// The node killed leads AGENTBUS_EVENTS and, moved there on purpose, the
// command stream and the shared durable consumers; one agentbus replica is
// connected to it. Commands are submitted round-robin to both replicas
// before, during and after the kill; a submission that fails is retried
// with the same envelope (idempotent by source and id) until it gets 202,
// for at most 20 s. Readers hit both replicas meanwhile.
//
// Failures (data safety): a command not accepted within 20 s; a 202 whose
// command has no OrderPlaced, or more than one, through GET
// /events?correlationId= within 45 s; a duplicate event id or a missing or
// extra OrderPlaced across the pages of GET /events; a command stored twice
// in AGENTBUS_COMMANDS; a 4xx for a valid command; an error that is not the
// spec's error body; a replica not answering; a consumer loop that stops;
// streams not R3 or not caught up after the node restarts.
//
// Failover defects fail it too (AGENTBUS_CLUSTER_LENIENT=1 only logs them,
// for investigating): requests hung for seconds, 500 where 503 with
// Retry-After is meant, a read answering 200 with the wrong events, a
// correlation index lagging the event log by more than 10 s.
//
// Everything runs in-process on loopback with random ports. The test takes
// 15 to 45 s and is skipped with -short. AGENTBUS_TEST_LOG=1 prints
// agentbus's and nats-server's logs.
//
// TestReplicasStartTogether and TestNATSDown run real processes instead:
// nats-server built from the module go.mod requires, and agentbus.
package cluster_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	agentbus "github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	clusterName   = "agentbus"
	eventsStream  = "AGENTBUS_EVENTS"
	commandStream = "AGENTBUS_COMMANDS"
	source        = "cluster-test"
	// acceptWindow is how long one envelope may be retried before the test
	// calls it lost: the cluster must elect new leaders well within it.
	acceptWindow = 20 * time.Second
	// slowRequest marks an HTTP request as slow in the report.
	slowRequest = 2 * time.Second
)

var (
	verbose = os.Getenv("AGENTBUS_TEST_LOG") != ""
	// strict makes failover defects (see defect) failures; lenient runs
	// only log them.
	strict = os.Getenv("AGENTBUS_CLUSTER_LENIENT") == ""
)

// hangAfter marks a request as hung: the NATS connection is back within
// milliseconds of the kill and new leaders within about a second, so a
// request taking this long was waiting on a reply that could not come.
const hangAfter = 4 * time.Second

// defect reports behaviour that loses nothing but falls short of what a
// careful caller expects during failover (a hung request, a 500 where 503
// is meant, a wrong 200 page, a lagging correlation index). They fail the
// test unless AGENTBUS_CLUSTER_LENIENT=1 asks only to log them.
func defect(t *testing.T, format string, args ...any) {
	t.Helper()
	if strict {
		t.Errorf("failover defect: "+format, args...)
		return
	}
	t.Logf("FAILOVER DEFECT: "+format, args...)
}

func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("three-node cluster failover test; skipped with -short")
	}
	began := time.Now()

	c := startCluster(t)
	js := testkit.JetStream(t, c.urls(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	c.waitReady(js, 3, 30*time.Second)
	t.Logf("cluster of 3 ready in %s", time.Since(began).Round(time.Millisecond))

	sink := &logSink{}
	replicas := []*agentbus.Server{
		startAgentbus(t, c.urls(), sink, "replica0"),
		startAgentbus(t, c.urls(), sink, "replica1"),
	}
	bases := []string{replicas[0].URL, replicas[1].URL}
	t.Logf("agentbus replicas at %v (%s); their NATS request timeout is %s",
		bases, time.Since(began).Round(time.Millisecond), replicas[0].Conn.NC.Opts.Timeout.Round(time.Millisecond))

	// Every stream and bucket is R3; so are the shared durable consumers.
	// No receipt is kept in NATS: there is no receipts bucket, and no
	// receipts consumer.
	for _, name := range []string{commandStream, eventsStream, "AGENTBUS_SYNTHETIC", "KV_AGENTBUS_KEYS", "KV_AGENTBUS_SECRETS"} {
		info := waitR3(t, js, name, 15*time.Second)
		t.Logf("stream %s: R%d, %s", name, info.Config.Replicas, describe(info.Cluster))
	}
	if _, err := js.Stream(context.Background(), "KV_AGENTBUS_RECEIPTS"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the receipts bucket's stream: %v; want none", err)
	}
	for _, stream := range []string{commandStream, eventsStream} {
		if ci := testkit.ConsumerInfo(t, js, stream, "receipts"); ci != nil {
			t.Errorf("a receipts consumer on %s: %s", stream, describe(ci.Cluster))
		}
	}
	for _, sc := range [][2]string{{commandStream, "processor"}, {eventsStream, "control"}, {eventsStream, "subscriptions"}} {
		ci := testkit.ConsumerInfo(t, js, sc[0], sc[1])
		if ci == nil {
			t.Fatalf("consumer %s/%s is missing", sc[0], sc[1])
		}
		if ci.Cluster == nil || len(ci.Cluster.Replicas) != 2 {
			t.Errorf("consumer %s/%s is not replicated on 3 nodes: %s", sc[0], sc[1], describe(ci.Cluster))
		}
	}

	led := &ledger{}
	submitN := func(phase string, n, workers int) {
		var wg sync.WaitGroup
		var next atomic.Int64
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					led.run(bases, phase)
				}
			}()
		}
		wg.Wait()
	}

	// 1. Before the failure.
	submitN("before", 40, 4)
	checkEventsOf(t, js, bases, led.all(), 10*time.Second, 20*time.Second)

	// 2. Load running while the leader of the event stream goes down. The
	// meaningful case is the worst one: the node replica 0 is connected to
	// leads the command and event streams and the shared consumers, so one
	// kill takes away the writes' leaders and a replica's connection at
	// once. Leaders are moved there first when they are elsewhere.
	target := replicas[0].Conn.NC.ConnectedServerName()
	gathered := gatherLeaders(t, js.Conn(), js, target)
	info := testkit.StreamInfo(t, js, eventsStream)
	victim := c.byName(info.Cluster.Leader)
	if victim == nil {
		t.Fatalf("stream %s: leader %q is not one of the nodes", eventsStream, info.Cluster.Leader)
	}
	meta := c.server(victim).JetStreamIsLeader()
	t.Logf("killing %s: leader of %v; meta leader: %v; replica 0 connected to %s, replica 1 to %s",
		victim.name, gathered, meta, replicas[0].Conn.NC.ConnectedServerName(), replicas[1].Conn.NC.ConnectedServerName())

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				led.run(bases, "during")
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	// Readers on both replicas at once. A read stuck on NATS may take up
	// to readClient's timeout; the test goes on without waiting for it.
	reads := &readLog{}
	known := led.all()[0].corr
	var rwg sync.WaitGroup
	for r, base := range bases {
		for range 3 {
			rwg.Add(1)
			go func() {
				defer rwg.Done()
				reads.poll(base, r, known, stop)
			}()
		}
	}
	time.Sleep(time.Second)
	killedAt := time.Now()
	c.stop(victim)
	t.Logf("%s shut down in %s", victim.name, time.Since(killedAt).Round(time.Millisecond))
	time.Sleep(8 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("load stopped %s after the kill", time.Since(killedAt).Round(time.Millisecond))

	// New leaders on the two survivors.
	for _, name := range []string{commandStream, eventsStream} {
		info := testkit.StreamInfo(t, js, name)
		if info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == victim.name {
			t.Errorf("stream %s after the kill: %s", name, describe(info.Cluster))
		} else {
			t.Logf("stream %s after the kill: %s", name, describe(info.Cluster))
		}
	}

	// 3. After the failure: one more batch on two nodes.
	submitN("after", 20, 4)

	checkEventsOf(t, js, bases, led.all(), 10*time.Second, 45*time.Second)
	checkLog(t, bases, led.all())
	checkAnswers(t, bases)
	checkCommandsStored(t, js, led.all())

	// 4. The killed node comes back and catches up.
	restartAt := time.Now()
	c.start(victim)
	c.waitReady(js, 3, 20*time.Second)
	for _, name := range []string{commandStream, eventsStream} {
		info := waitR3(t, js, name, 20*time.Second)
		t.Logf("stream %s after %s rejoined: %s", name, victim.name, describe(info.Cluster))
	}
	t.Logf("%s rejoined and caught up in %s", victim.name, time.Since(restartAt).Round(time.Millisecond))
	submitN("rejoined", 20, 4)
	checkEventsOf(t, js, bases, led.all(), 10*time.Second, 20*time.Second)
	checkLog(t, bases, led.all())
	checkAnswers(t, bases)
	checkCommandsStored(t, js, led.all())

	rwg.Wait()
	report(t, led.all(), killedAt, sink.snapshot())
	reads.report(t, killedAt)
	lostAcks(t, js, led.all())
	t.Logf("total %s", time.Since(began).Round(time.Millisecond))
}
