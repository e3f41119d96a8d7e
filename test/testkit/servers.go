package testkit

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	natsserver "github.com/nats-io/nats-server/v2/server"
)

// NATSServer starts a nats-server in-process on a free 127.0.0.1 port,
// with JetStream storing under t.TempDir(), and returns its client URL
// once it accepts connections. mutate edits the options first (set
// JetStream to false for a server without it). Several clients and
// agentbus instances may share the server. It fails t when the server
// does not start or is not ready within 10s, and shuts it down when t ends.
func NATSServer(t testing.TB, mutate ...func(*natsserver.Options)) string {
	t.Helper()
	opts := &natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	}
	for _, m := range mutate {
		m(opts)
	}
	ns, err := natsserver.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("in-process nats-server not ready after 10s")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

// Agentbus starts agentbus in-process with the default configuration, HTTP
// on a free 127.0.0.1 port (s.URL), a fresh data directory under
// t.TempDir(), and its embedded nats-server also listening on a free
// 127.0.0.1 port, so separate programs (agents, external processors) can
// connect to s.Conn.ClientURL(). mutate edits the configuration before the
// start. Warnings and errors are logged to stderr, everything when
// AGENTBUS_TEST_LOG is set. It fails t when agentbus does not start, and
// stops it (10s grace) when t ends.
func Agentbus(t testing.TB, mutate ...func(*settings.Config)) *server.Server {
	t.Helper()
	return AgentbusWithLogger(t, Logger(), mutate...)
}

// AgentbusWithLogger is Agentbus with log as agentbus's logger instead of
// Logger().
func AgentbusWithLogger(t testing.TB, log *slog.Logger, mutate ...func(*settings.Config)) *server.Server {
	t.Helper()
	cfg := settings.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Data = t.TempDir()
	natsListen := "127.0.0.1:-1"
	cfg.NATS.Listen = &natsListen
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := server.Start(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("start agentbus: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

// NoNATSPort keeps the embedded nats-server of Agentbus in-process only,
// for tests that need no second program to connect.
func NoNATSPort(c *settings.Config) {
	none := ""
	c.NATS.Listen = &none
}

// Logger returns the logger of in-process components under test: text to
// stderr, warnings and errors only unless AGENTBUS_TEST_LOG is set.
func Logger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("AGENTBUS_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
