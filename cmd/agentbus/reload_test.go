//go:build unix

package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/config"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestServeReloadsTheCatalogue: serve reloads its catalogue on SIGHUP,
// and, with catalog.reload set, when a poll finds its files changed.
func TestServeReloadsTheCatalogue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reload string
		hangup bool
	}{{"SIGHUP", "0s", true}, {"poll", "1s", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cat := filepath.Join(t.TempDir(), "catalog")
			if err := os.CopyFS(cat, config.ExampleCatalog()); err != nil {
				t.Fatal(err)
			}
			cfgFile := filepath.Join(t.TempDir(), "agentbus.yaml")
			cfgYAML := "catalog:\n  dirs: [" + cat + "]\n  reload: " + tc.reload + "\n"
			if err := os.WriteFile(cfgFile, []byte(cfgYAML), 0o644); err != nil {
				t.Fatal(err)
			}
			addr, serveLog, stop := startServe(t, "--config", cfgFile, "--data", t.TempDir(), "--nats-listen", "")
			listed := func() bool {
				res, err := http.Get("http://" + addr + "/commands")
				if err != nil {
					return false
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return strings.Contains(string(b), `"return-order"`)
			}

			yaml, err := os.ReadFile(filepath.Join(cat, "catalog.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(cat, "commands", "return-order"), 0o755); err != nil {
				t.Fatal(err)
			}
			schema := `{"type":"object","properties":{"orderId":{"type":"string"}},"examples":[{"orderId":"ord-1"}]}`
			if err := os.WriteFile(filepath.Join(cat, "commands", "return-order", "1.0.json"), []byte(schema), 0o644); err != nil {
				t.Fatal(err)
			}
			entry := "\ncommands:\n  - type: ReturnOrder\n    version: \"1.0\"\n    description: Returns an order.\n"
			if err := os.WriteFile(filepath.Join(cat, "catalog.yaml"), []byte(strings.Replace(string(yaml), "\ncommands:\n", entry, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.hangup {
				if listed() {
					t.Fatal("ReturnOrder is listed before any reload")
				}
				if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
			}
			testkit.EventuallyWithin(t, "ReturnOrder in GET /commands", 20*time.Second, listed)
			if err := stop(); err != nil {
				t.Fatalf("serve: %v", err)
			}
			if !strings.Contains(serveLog.String(), "catalogue reloaded") {
				t.Errorf("serve's log does not say the catalogue was reloaded:\n%s", serveLog.String())
			}
		})
	}
}
