package client_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestMain starts the agentbus the examples and most tests talk to
// (in-process, authentication none, loopback webhooks allowed) and gives
// its address as AGENTBUS_URL, as a user's shell would.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "agentbus-client-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cfg := settings.Default()
	cfg.Listen, cfg.Data = "127.0.0.1:0", dir
	none := ""
	cfg.NATS.Listen = &none
	cfg.Webhooks.AllowPrivate = true
	s, err := server.Start(context.Background(), cfg, testkit.Logger())
	if err != nil {
		fmt.Fprintln(os.Stderr, "start agentbus:", err)
		return 1
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	}()
	os.Setenv("AGENTBUS_URL", s.URL)
	os.Unsetenv("AGENTBUS_KEY")
	return m.Run()
}
