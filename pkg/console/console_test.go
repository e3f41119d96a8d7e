package console_test

import (
	"io/fs"
	"net/http/httptest"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/console"
)

func get(t *testing.T, method string, pg console.Page, file string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	console.Serve(w, httptest.NewRequest(method, pg.Base()+file, nil), pg, file)
	return w
}

func TestHeadersOnEveryAnswer(t *testing.T) {
	for _, c := range []struct{ method, file string }{
		{"GET", ""}, {"GET", "app.js"}, {"GET", "style.css"}, {"GET", "traces/abc"}, {"GET", "nothing.js"}, {"POST", ""}, {"HEAD", "app.js"},
	} {
		w := get(t, c.method, console.Page{}, c.file)
		h := w.Header()
		if h.Get("Content-Security-Policy") != console.CSP {
			t.Errorf("%s %s: CSP %q", c.method, c.file, h.Get("Content-Security-Policy"))
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s %s: headers %v", c.method, c.file, h)
		}
	}
	if !strings.Contains(console.CSP, "frame-ancestors 'none'") || strings.Contains(console.CSP, "unsafe") {
		t.Errorf("CSP %q", console.CSP)
	}
}

func TestEmbeddedFiles(t *testing.T) {
	for file, typ := range map[string]string{"app.js": "text/javascript", "style.css": "text/css", "vendor/htm-preact.js": "text/javascript"} {
		w := get(t, "GET", console.Page{}, file)
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), typ) || w.Body.Len() == 0 {
			t.Errorf("%s: %d %q %d bytes", file, w.Code, w.Header().Get("Content-Type"), w.Body.Len())
		}
	}
	if w := get(t, "HEAD", console.Page{}, "app.js"); w.Code != 200 || w.Body.Len() != 0 {
		t.Errorf("HEAD app.js: %d, %d bytes", w.Code, w.Body.Len())
	}
	if w := get(t, "GET", console.Page{}, "missing.js"); w.Code != 404 {
		t.Errorf("missing.js: %d", w.Code)
	}
	if w := get(t, "POST", console.Page{}, ""); w.Code != 405 {
		t.Errorf("POST: %d", w.Code)
	}
	// No way out of the assets.
	if w := get(t, "GET", console.Page{}, "../console.go"); w.Code != 404 && !strings.Contains(w.Body.String(), "<!doctype html>") {
		t.Errorf("../console.go: %d %q", w.Code, w.Body.String())
	}
}

func TestPageForEveryRoute(t *testing.T) {
	for _, file := range []string{"", "index.html", "traces/abc-123", "events"} {
		w := get(t, "GET", console.Page{Root: "/bus", Tenant: "acme"}, file)
		body := w.Body.String()
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("%q: %d %q", file, w.Code, w.Header().Get("Content-Type"))
		}
		for _, want := range []string{`src="/bus/acme/console/app.js"`, `href="/bus/acme/console/style.css"`, `name="agentbus-api" content="/bus/acme"`,
			`name="agentbus-root" content="/bus"`, `name="agentbus-tenant" content="acme"`} {
			if !strings.Contains(body, want) {
				t.Errorf("%q: page lacks %s:\n%s", file, want, body)
			}
		}
		if strings.Contains(body, "<script>") || strings.Contains(body, "style=") {
			t.Errorf("%q: inline script or style:\n%s", file, body)
		}
	}
}

// TestNoOtherHost: no file of the console names another host (an XML
// namespace aside, which is a name, not an address), nor evaluates code.
func TestNoOtherHost(t *testing.T) {
	n := 0
	err := fs.WalkDir(os.DirFS("assets"), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) == "" || !strings.Contains(".js .css .html", path.Ext(p)) {
			return err
		}
		n++
		body := get(t, "GET", console.Page{}, p).Body.String()
		body = strings.ReplaceAll(body, "http://www.w3.org/", "")
		for _, bad := range []string{"http://", "https://", "//cdn", "eval(", "new Function"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s contains %q", p, bad)
			}
		}
		return nil
	})
	if err != nil || n < 8 {
		t.Fatalf("%d files checked: %v", n, err)
	}
}
