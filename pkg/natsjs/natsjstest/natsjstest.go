// Package natsjstest gives a test its own in-process nats-server, as
// agentbus embeds it. Only tests import it.
package natsjstest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
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
	if err := conn.Apply(ctx, []natsjs.Spec{{Kind: "kv", Name: bucket, Storage: "file", History: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	kv, err := conn.KV(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
