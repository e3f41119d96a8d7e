package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// chromium returns Debian's chromium, skipping t with the reason when it is
// not installed (make test installs it with apt-get where it can).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed: the console's browser test is skipped (make test installs Debian's chromium with apt-get when it can)")
	return ""
}

// browsed is what console-browser.mjs saw.
type browsed struct {
	Error       string                    `json:"error"`
	Steps       []string                  `json:"steps"`
	Errors      []string                  `json:"errors"`
	Failed      []string                  `json:"failed"`
	Unexpected  []string                  `json:"unexpected"`
	Foreign     []string                  `json:"foreign"`
	Axe         map[string][]axeViolation `json:"axe"`
	Screenshots []string                  `json:"screenshots"`
}

type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// TestConsoleInBrowser drives the web console in a headless Chromium
// (puppeteer-core) against a real agentbus with bearer authentication:
// a wrong key is refused at the sign-in; sign in with an API key; the live view receives an event sent over REST
// and opens its envelope, holds new events while paused, filters by type
// and by correlation id; the form generated from the catalogue's schema
// follows the type and version chosen, shows a missing field at its path
// before sending and the API's violation there after, then, once the
// command is sent, its story with its event; another
// command's story shows the webhook attempt of a local receiver; a story
// open before its command is sent shows the push of its event to the
// page's own live stream; an agent
// is paused; the receiver's
// subscription shows its attempts, reveals and rotates its secret, is
// disabled and enabled, redelivered and replayed; a read-only
// key sees no write buttons; revoking that key brings the sign-in back.
// Throughout: no console error (a CSP violation is one), no failed
// request, no answer of 400 or more but those a step provokes, no request
// to another host, and axe-core finds no serious or critical violation on
// any page. The screenshots are kept in a directory the test prints.
func TestConsoleInBrowser(t *testing.T) {
	node := requireNode(t)
	browser := chromium(t)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"received":true}`))
	}))
	defer hook.Close()
	s := startAgentbus(t, func(c *settings.Config) {
		c.Auth.Type = "bearer"
		c.Webhooks.AllowPrivate = true
		c.Limits.Rate = settings.Rate{}
	})
	keys, _ := testkit.Keys(t, s)
	ctx := context.Background()
	writeKey, _, err := keys.Create(ctx, auth.NewKeyRequest{Tenants: []string{"*"}, Scopes: auth.AllScopes})
	if err != nil {
		t.Fatal(err)
	}
	readKey, readRec, err := keys.Create(ctx, auth.NewKeyRequest{Tenants: []string{"*"}, Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	revoke := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := keys.Revoke(r.Context(), readRec.ID); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// Every replica's key watch sees the revocation; this one's at once.
		time.Sleep(200 * time.Millisecond)
	}))
	defer revoke.Close()

	b := browse(t, node, browser, map[string]string{"scenario": "full", "base": s.URL, "writeKey": writeKey, "readKey": readKey,
		"revokeURL": revoke.URL, "hookURL": hook.URL + "/hook"})
	if len(b.Axe) < 8 {
		t.Errorf("axe-core ran on %d pages, want 8", len(b.Axe))
	}
	if len(b.Screenshots) < 10 {
		t.Errorf("%d screenshots, want at least 10", len(b.Screenshots))
	}
}

// browse runs console-browser.mjs with cfg (and chromium, the artifacts
// directory) and fails t for anything it saw go wrong: the run stopping, a
// console error, a failed request, an answer of 400 or more no step
// provoked, a request to another host, a serious or critical axe-core
// violation. The screenshots go to AGENTBUS_CONSOLE_ARTIFACTS, or to a
// temporary directory the test names and keeps only when it fails.
func browse(t *testing.T, node, browser string, cfg map[string]string) browsed {
	t.Helper()
	if _, err := os.Stat("node_modules/puppeteer-core/package.json"); err != nil {
		t.Fatalf("test/interop/node_modules lacks puppeteer-core: %s", installAdvice)
	}
	artifacts := os.Getenv("AGENTBUS_CONSOLE_ARTIFACTS")
	var err error
	if artifacts == "" {
		artifacts, err = os.MkdirTemp("", "agentbus-console-screenshots-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !t.Failed() {
				os.RemoveAll(artifacts)
			}
		})
	} else if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg["chromium"], cfg["artifacts"] = browser, artifacts
	conf, _ := json.Marshal(cfg)
	confFile := filepath.Join(t.TempDir(), "console.json")
	if err := os.WriteFile(confFile, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "console-browser.mjs", confFile)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("console-browser.mjs: %v\n%s", err, errb.String())
	}
	var b browsed
	if err := json.Unmarshal(out.Bytes(), &b); err != nil {
		t.Fatalf("console-browser.mjs printed %q: %v\n%s", out.String(), err, errb.String())
	}
	t.Logf("console screenshots (%s; a temporary directory is kept only if the test fails): %s", cfg["scenario"], artifacts)
	for _, st := range b.Steps {
		t.Logf("seen: %s", st)
	}
	if b.Error != "" {
		t.Errorf("the browser run stopped: %s", b.Error)
	}
	for what, list := range map[string][]string{"console errors": b.Errors, "failed requests": b.Failed,
		"answers no step provoked": b.Unexpected, "requests to another host": b.Foreign} {
		if len(list) > 0 {
			t.Errorf("%s:\n  %s", what, strings.Join(list, "\n  "))
		}
	}
	for page, vs := range b.Axe {
		for _, v := range vs {
			if v.Impact == "serious" || v.Impact == "critical" {
				t.Errorf("axe-core on %s: %s %s (%s) at %v", page, v.Impact, v.ID, v.Help, v.Nodes)
			} else {
				t.Logf("axe-core on %s: %s %s (%s) at %v", page, v.Impact, v.ID, v.Help, v.Nodes)
			}
		}
	}
	return b
}

// TestConsoleTenantsInBrowser: with API keys in a header and multi-tenant
// mode, a key of tenants a and b with read and write signs in at
// /a/console/; the console finds its scopes by asking the API (write yes,
// admin no), follows tenant a's log, and switches to tenant b's console,
// still signed in, without a's events.
func TestConsoleTenantsInBrowser(t *testing.T) {
	node := requireNode(t)
	browser := chromium(t)
	s := startAgentbus(t, func(c *settings.Config) {
		c.Auth.Type, c.Auth.Scheme = "apikey-header", "X-API-Key"
		c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"a", "b"}
		c.Limits.Rate = settings.Rate{}
	})
	key := testkit.Key(t, s, []string{"a", "b"}, auth.ScopeRead, auth.ScopeWrite)
	b := browse(t, node, browser, map[string]string{"scenario": "tenants", "base": s.URL, "writeKey": key})
	if len(b.Steps) < 3 {
		t.Errorf("%d steps seen, want 3", len(b.Steps))
	}
}

// TestConsoleOpenInBrowser: with --auth none the console opens without a
// sign-in; the story of a correlation id no command has waits, then says
// TRACE_NOT_FOUND.
func TestConsoleOpenInBrowser(t *testing.T) {
	node := requireNode(t)
	browser := chromium(t)
	s := startAgentbus(t, nil)
	b := browse(t, node, browser, map[string]string{"scenario": "open", "base": s.URL})
	if len(b.Steps) < 1 {
		t.Errorf("%d steps seen, want 1", len(b.Steps))
	}
}
