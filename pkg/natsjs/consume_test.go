package natsjs

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPullAsksAgainAfterAServerRestart: a restarted server has forgotten a
// consumer's open pull request. The consumer asks again as soon as it has
// reconnected, not when its silence timer fires (an hour here, so a
// consumer that waited for it would never see the second message).
func TestPullAsksAgainAfterAServerRestart(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	start := func() *server.Server {
		t.Helper()
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		if !ns.ReadyForConnections(30 * time.Second) {
			t.Fatal("nats-server not ready")
		}
		return ns
	}
	ns := start()
	defer func() { ns.Shutdown() }()

	ctx, cancel := context.WithCancel(context.Background())
	conn, err := Connect(ctx, Config{URL: ns.ClientURL()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.pullSilence = time.Hour
	if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.JS.CreateConsumer(ctx, "P", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = conn.Consume(ctx, "P", "c", ConsumeOptions{Workers: 1}, func(ctx context.Context, d bus.Delivery) {
			got <- string(d.Message().Data)
			_ = d.Ack(ctx)
		})
	}()
	defer func() { cancel(); <-done }() // before the connection closes
	publish := func(data string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			_, err := conn.JS.Publish(pctx, "p.x", []byte(data))
			pcancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish %s: %v", data, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	receive := func(want string) {
		t.Helper()
		select {
		case m := <-got:
			if m != want {
				t.Fatalf("received %q, want %q", m, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%q was not delivered", want)
		}
	}
	publish("one")
	receive("one")

	reconnected := conn.nextReconnect()
	ns.Shutdown()
	ns.WaitForShutdown()
	ns = start()
	select {
	case <-reconnected:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconnect")
	}
	publish("two")
	receive("two")
}
