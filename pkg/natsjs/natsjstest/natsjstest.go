// Package natsjstest gives a test its own in-process nats-server, as
// agentbus embeds it. Only tests import it.
package natsjstest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/nats-io/nats.go/jetstream"
)

// Conn starts an embedded nats-server storing under t.TempDir() and
// returns the connection to it. It fails t when the server is not ready
// within 30s, and closes both when t ends.
func Conn(t testing.TB) *natsjs.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := natsjs.Connect(ctx, natsjs.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// KV makes a key-value bucket keeping one revision per key on a fresh
// embedded server (Conn) and returns it. It fails t when the bucket cannot
// be made.
func KV(t testing.TB, bucket string) *natsjs.KV {
	t.Helper()
	conn := Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := conn.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1}); err != nil {
		t.Fatal(err)
	}
	kv, err := conn.KV(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
