// The three-node JetStream cluster, in-process, and what the test reads
// and steers of it (stream info, leaders).

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// node is one nats-server of the cluster. Its ports and store survive a
// restart, so the agentbus replicas' URL list stays valid.
type node struct {
	name        string
	clientPort  int
	clusterPort int
	storeDir    string
	srv         *server.Server
}

func (n *node) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.clientPort) }

type cluster struct {
	t     *testing.T
	nodes []*node
	mu    sync.Mutex // guards node.srv
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t}
	for i := 1; i <= 3; i++ {
		c.nodes = append(c.nodes, &node{
			name: fmt.Sprintf("n%d", i), clientPort: testkit.FreePort(t), clusterPort: testkit.FreePort(t), storeDir: t.TempDir(),
		})
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if s := c.server(n); s != nil {
				s.Shutdown()
				s.WaitForShutdown()
			}
		}
	})
	for _, n := range c.nodes {
		c.start(n)
	}
	return c
}

// options builds a fresh server.Options for n (the server mutates the ones
// it is given, so a restart must not reuse them).
func (c *cluster) options(n *node) *server.Options {
	var routes []string
	for _, o := range c.nodes {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.clusterPort))
	}
	return &server.Options{
		ServerName:         n.name,
		Host:               "127.0.0.1",
		Port:               n.clientPort,
		NoSigs:             true,
		NoLog:              !verbose,
		JetStream:          true,
		StoreDir:           n.storeDir,
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  1 << 30,
		MaxPayload:         8 << 20,
		Cluster: server.ClusterOpts{
			Name: clusterName, Host: "127.0.0.1", Port: n.clusterPort,
		},
		Routes: server.RoutesFromStr(strings.Join(routes, ",")),
	}
}

func (c *cluster) start(n *node) {
	c.t.Helper()
	s, err := server.NewServer(c.options(n))
	if err != nil {
		c.t.Fatalf("nats-server %s: %v", n.name, err)
	}
	if verbose {
		s.ConfigureLogger()
	}
	go s.Start()
	// Generous: CI runs the test packages side by side on two cores, and
	// a node can take more than 15 s to accept clients there.
	if !s.ReadyForConnections(time.Minute) {
		c.t.Fatalf("nats-server %s not ready after a minute", n.name)
	}
	c.mu.Lock()
	n.srv = s
	c.mu.Unlock()
}

func (c *cluster) server(n *node) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.srv
}

// stop shuts n down, as a crash of that machine would look to its peers.
func (c *cluster) stop(n *node) {
	c.mu.Lock()
	s := n.srv
	n.srv = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

func (c *cluster) byName(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

func (c *cluster) urls() string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, n.url())
	}
	return strings.Join(u, ",")
}

// metaPeers returns the JetStream peers the current meta leader sees
// online, or nil when no running node is the meta leader.
func (c *cluster) metaPeers() []string {
	for _, n := range c.nodes {
		if s := c.server(n); s != nil && s.JetStreamIsLeader() {
			return s.JetStreamClusterPeers()
		}
	}
	return nil
}

// waitReady waits until a meta leader sees want JetStream peers online and
// answers the JetStream API (AccountInfo goes through the meta leader).
func (c *cluster) waitReady(js jetstream.JetStream, want int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if peers := c.metaPeers(); len(peers) != want {
			last = fmt.Errorf("meta leader sees peers %v, want %d", peers, want)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := js.AccountInfo(ctx)
			cancel()
			if err == nil {
				return
			}
			last = fmt.Errorf("account info: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("cluster not ready after %s: %v", timeout, last)
}

// ---------------------------------------------------------------------------
// JetStream checks.

// waitR3 waits until stream name is R3 with a leader and two current
// followers, and returns its info.
func waitR3(t *testing.T, js jetstream.JetStream, name string, timeout time.Duration) *jetstream.StreamInfo {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		info := testkit.StreamInfo(t, js, name)
		if info.Config.Replicas != 3 {
			t.Fatalf("stream %s has %d replicas, want 3", name, info.Config.Replicas)
		}
		ok := info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == 2
		if ok {
			for _, p := range info.Cluster.Replicas {
				ok = ok && p.Current && !p.Offline
			}
		}
		if ok {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s not R3 with two current followers after %s: %s", name, timeout, describe(info.Cluster))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func describe(ci *jetstream.ClusterInfo) string {
	if ci == nil {
		return "no cluster info"
	}
	var ps []string
	for _, p := range ci.Replicas {
		ps = append(ps, fmt.Sprintf("%s(current=%v offline=%v lag=%d)", p.Name, p.Current, p.Offline, p.Lag))
	}
	return fmt.Sprintf("leader %q, replicas %v", ci.Leader, ps)
}

// raftGroups are the stream and consumer groups agentbus's writes and
// projections depend on.
var raftGroups = [][2]string{
	{commandStream, ""}, {eventsStream, ""},
	{commandStream, "processor"}, {eventsStream, "control"},
}

func groupName(g [2]string) string {
	if g[1] == "" {
		return g[0]
	}
	return g[0] + "/" + g[1]
}

func groupLeader(js jetstream.JetStream, g [2]string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if g[1] == "" {
		s, err := js.Stream(ctx, g[0])
		if err != nil {
			return "", err
		}
		info, err := s.Info(ctx)
		if err != nil || info.Cluster == nil {
			return "", err
		}
		return info.Cluster.Leader, nil
	}
	c, err := js.Consumer(ctx, g[0], g[1])
	if err != nil {
		return "", err
	}
	info, err := c.Info(ctx)
	if err != nil || info.Cluster == nil {
		return "", err
	}
	return info.Cluster.Leader, nil
}

// gatherLeaders moves the leader of every group in raftGroups to node
// target (leader step-down with a preferred placement) and returns the
// groups target leads afterwards.
func gatherLeaders(t *testing.T, nc *nats.Conn, js jetstream.JetStream, target string) []string {
	t.Helper()
	var led []string
	for _, g := range raftGroups {
		subj := "$JS.API.STREAM.LEADER.STEPDOWN." + g[0]
		if g[1] != "" {
			subj = "$JS.API.CONSUMER.LEADER.STEPDOWN." + g[0] + "." + g[1]
		}
		req, _ := json.Marshal(map[string]any{"placement": map[string]any{"preferred": target}})
		deadline := time.Now().Add(10 * time.Second)
		for {
			l, err := groupLeader(js, g)
			if err == nil && l == target {
				led = append(led, groupName(g))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("could not move the leader of %s to %s in 10s (leader %q, %v)", groupName(g), target, l, err)
			}
			if err == nil && l != "" {
				if _, err := nc.Request(subj, req, 3*time.Second); err != nil {
					t.Logf("step down %s: %v", groupName(g), err)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return led
}
