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
