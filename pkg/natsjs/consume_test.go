package natsjs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPullAsksAgainAfterAServerRestart: a restarted server has forgotten a
// consumer's open pull request. The consumer asks again at the server's
// "409 Server Shutdown" and at the reconnect, not when its silence timer
// fires (an hour here, so a consumer that waited for it would never see the
// second message), and does not take the shutdown for a refusal (logged,
// and asked again only after a pause).
func TestPullAsksAgainAfterAServerRestart(t *testing.T) { testRestart(t, false) }

// TestPullAsksAgainAfterAnUnannouncedRestart: when the connection is lost
// before the server stops, as when a server is killed, the "409 Server
// Shutdown" never arrives; the reconnect alone has the consumer ask again.
func TestPullAsksAgainAfterAnUnannouncedRestart(t *testing.T) { testRestart(t, true) }

func testRestart(t *testing.T, unannounced bool) {
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

	url := ns.ClientURL()
	var proxy *linkProxy
	if unannounced {
		proxy = newLinkProxy(t, ns.Addr().String())
		url = "nats://" + proxy.addr()
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The log goes to a file: an *os.File takes concurrent writes.
	logged, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer logged.Close()
	conn, err := Connect(ctx, Config{URL: url}, slog.New(slog.NewTextHandler(logged, nil)))
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

	reconnected := conn.NC.StatusChanged(nats.CONNECTED)
	defer conn.NC.RemoveStatusListener(reconnected)
	if unannounced {
		proxy.setDown(true) // the client hears nothing more, the 409 included
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	ns = start()
	if unannounced {
		proxy.setDown(false)
	}
	select {
	case <-reconnected:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconnect")
	}
	publish("two")
	receive("two")
	log, err := os.ReadFile(logged.Name())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), "pull request refused") {
		t.Errorf("the consumer went on only after a refused request:\n%s", log)
	}
}

// linkProxy forwards TCP connections to a server; while down it cuts the
// ones it carries and refuses new ones, as a dead link or host would.
type linkProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func newLinkProxy(t *testing.T, target string) *linkProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.setDown(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.carry(c)
		}
	}()
	return p
}

func (p *linkProxy) addr() string { return p.ln.Addr().String() }

func (p *linkProxy) carry(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil || p.down {
		c.Close()
		if s != nil {
			s.Close()
		}
		return
	}
	p.conns = append(p.conns, c, s)
	go func() { _, _ = io.Copy(s, c); s.Close() }()
	go func() { _, _ = io.Copy(c, s); c.Close() }()
}

// setDown cuts every carried connection and refuses new ones (true), or
// carries again (false).
func (p *linkProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// streamP connects to a fresh embedded server, in-process only, and
// creates the stream P (subjects p.>) on it; the connection closes when
// the test ends.
func streamP(ctx context.Context, t *testing.T) *Conn {
	t.Helper()
	conn, err := Connect(ctx, Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.>"}}); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestConsumeEndsWhenItsConsumerIsDeleted: a consumer deleted while
// consumed ends Consume with ErrConsumerDeleted; one missing at the start
// is another error.
func TestConsumeEndsWhenItsConsumerIsDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := streamP(ctx, t)
	noop := func(ctx context.Context, d bus.Delivery) { _ = d.Ack(ctx) }
	if err := conn.Consume(ctx, "P", "missing", ConsumeOptions{}, noop); err == nil || errors.Is(err, ErrConsumerDeleted) {
		t.Fatalf("Consume of a missing consumer: %v, want an error other than ErrConsumerDeleted", err)
	}
	if _, err := conn.JS.CreateConsumer(ctx, "P", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- conn.Consume(ctx, "P", "c", ConsumeOptions{Workers: 1}, noop) }()
	// Deleted once Consume has a pull request open (its info shows it).
	for {
		c, err := conn.JS.Consumer(ctx, "P", "c")
		if err != nil {
			t.Fatal(err)
		}
		if info, err := c.Info(ctx); err == nil && info.NumWaiting > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := conn.JS.DeleteConsumer(ctx, "P", "c"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrConsumerDeleted) {
			t.Fatalf("Consume of a deleted consumer: %v, want ErrConsumerDeleted", err)
		}
	case <-ctx.Done():
		t.Fatal("Consume did not end when its consumer was deleted")
	}
}
