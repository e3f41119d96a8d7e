package e2e_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/console"
	"github.com/agentbus/agentbus/pkg/settings"
)

// coCheckPage fails t unless r is the console's page, with its security
// headers, naming its scripts under base and the API under api.
func coCheckPage(t *testing.T, r *response, base, api string) {
	t.Helper()
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, %q: %s", r.Status, r.Header.Get("Content-Type"), r.Body)
	}
	coCheckHeaders(t, r)
	for _, want := range []string{`src="` + base + `app.js"`, `name="agentbus-api" content="` + api + `"`} {
		if !strings.Contains(string(r.Body), want) {
			t.Errorf("the page lacks %s:\n%s", want, r.Body)
		}
	}
}

func coCheckHeaders(t *testing.T, r *response) {
	t.Helper()
	if got := r.Header.Get("Content-Security-Policy"); got != console.CSP {
		t.Errorf("Content-Security-Policy %q", got)
	}
	if r.Header.Get("X-Content-Type-Options") != "nosniff" || r.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("headers %v", r.Header)
	}
}

// TestConsoleServedWithoutCredentials: with authentication on, the
// console's files are public (they hold no data), with their security
// headers, at /console/ and every route of the application beneath it;
// /console redirects there; the API behind it still wants credentials.
func TestConsoleServedWithoutCredentials(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer")
	coCheckPage(t, get(t, s.URL+"/console/"), "/console/", "")
	coCheckPage(t, get(t, s.URL+"/console/traces/abc"), "/console/", "")
	js := get(t, s.URL+"/console/app.js")
	if js.Status != http.StatusOK || !strings.HasPrefix(js.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("app.js: %d %q", js.Status, js.Header.Get("Content-Type"))
	}
	coCheckHeaders(t, js)
	if r := get(t, s.URL+"/console/missing.js"); r.Status != http.StatusNotFound {
		t.Errorf("missing.js: %d", r.Status)
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/console", nil)
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/console/" {
		t.Errorf("/console: %d, Location %q", res.StatusCode, res.Header.Get("Location"))
	}
	if r := get(t, s.URL+"/events"); r.Status != http.StatusUnauthorized {
		t.Errorf("GET /events without credentials: %d", r.Status)
	}
	if r := do(t, http.MethodPost, s.URL+"/console/", "text/plain", []byte("x")); r.Status != http.StatusUnauthorized && r.Status != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/: %d", r.Status)
	}
}

// TestConsoleTenantPrefix: in multi-tenant mode the console is served
// under /{tenantId}/console/ and talks to /{tenantId}; an invalid tenant
// id is refused, and nothing is served at /console/.
func TestConsoleTenantPrefix(t *testing.T) {
	t.Parallel()
	s := auStart(t, "none", auMulti("acme"))
	coCheckPage(t, get(t, s.URL+"/acme/console/"), "/acme/console/", "/acme")
	coCheckPage(t, get(t, s.URL+"/acme/console/traces/x"), "/acme/console/", "/acme")
	if r := get(t, s.URL+"/acme/console/style.css"); r.Status != http.StatusOK {
		t.Errorf("style.css: %d", r.Status)
	}
	if r := get(t, s.URL+"/Not_A_Tenant/console/"); r.Status != http.StatusBadRequest || r.errorCode(t) != "VALIDATION_FAILED" {
		t.Errorf("invalid tenant: %d %s", r.Status, r.Body)
	}
	if r := get(t, s.URL+"/console/"); r.Status == http.StatusOK {
		t.Errorf("/console/ in multi-tenant mode: %d", r.Status)
	}
}

// TestConsoleDisabled: console.enabled false serves no console.
func TestConsoleDisabled(t *testing.T) {
	t.Parallel()
	s := auStart(t, "none", func(c *settings.Config) { c.Console.Enabled = false })
	for _, p := range []string{"/console/", "/console", "/console/app.js"} {
		if r := get(t, s.URL+p); r.Status != http.StatusNotFound {
			t.Errorf("%s: %d", p, r.Status)
		}
	}
}

// TestConsoleUnderPublicPath: behind a proxy that serves agentbus under a
// path (publicUrl with a path), the page names its files and the API under
// that path, as the browser sees them.
func TestConsoleUnderPublicPath(t *testing.T) {
	t.Parallel()
	s := auStart(t, "none", func(c *settings.Config) { c.PublicURL = "https://bus.example.com/agentbus/" })
	coCheckPage(t, get(t, s.URL+"/console/"), "/agentbus/console/", "/agentbus")
	if r := get(t, s.URL+"/console/"); !strings.Contains(string(r.Body), `name="agentbus-tenant" content=""`) {
		t.Errorf("single-tenant page names a tenant:\n%s", r.Body)
	}
	// Multi-tenant under a path: the tenant switch builds its links from
	// the root and the tenant the page names, not from the API's path.
	m := auStart(t, "none", auMulti("acme"), func(c *settings.Config) { c.PublicURL = "https://bus.example.com/agentbus/" })
	r := get(t, m.URL+"/acme/console/agents")
	coCheckPage(t, r, "/agentbus/acme/console/", "/agentbus/acme")
	for _, want := range []string{`name="agentbus-root" content="/agentbus"`, `name="agentbus-tenant" content="acme"`} {
		if !strings.Contains(string(r.Body), want) {
			t.Errorf("the page lacks %s:\n%s", want, r.Body)
		}
	}
}
