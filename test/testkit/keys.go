package testkit

import (
	"context"
	"testing"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/server"
)

// Keys opens the key registry of s's NATS, as `agentbus keys` does, and
// returns it started, with its bucket. It fails t when the bucket cannot
// be opened or read, and stops watching it when t ends.
func Keys(t testing.TB, s *server.Server) (*auth.Keys, *natsjs.KV) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kv, err := s.Conn.KV(ctx, natsjs.KeysBucket("agentbus"))
	if err != nil {
		t.Fatal(err)
	}
	k := auth.NewKeys(kv, nil)
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return k, kv
}

// Key creates an API key of tenants with scopes in the key registry of s's
// NATS (see Keys) and returns it. It fails t when the key cannot be
// created.
func Key(t testing.TB, s *server.Server, tenants []string, scopes ...auth.Scope) string {
	t.Helper()
	k, _ := Keys(t, s)
	key, _, err := k.Create(context.Background(), auth.NewKeyRequest{Tenants: tenants, Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	return key
}
