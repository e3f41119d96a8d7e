// Package console serves the web console: static files embedded in the
// binary (assets/), a single-page application that reaches agentbus only
// through its REST API, from the same origin, with the caller's own
// credential. The package serves files and nothing else: it knows no
// operation, no credential and no tenant beyond the path it is mounted at.
//
// Every answer carries a strict Content-Security-Policy (scripts, styles
// and connections from the same origin only, no inline code, no eval, no
// framing), X-Content-Type-Options: nosniff and Referrer-Policy:
// no-referrer.
package console

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// Path is where the console is served, relative to the endpoint (and, in
// multi-tenant mode, to /{tenantId}).
const Path = "/console/"

// CSP is the Content-Security-Policy of every console answer.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed assets
var assets embed.FS

// files are the assets, rooted at assets/.
var files = func() fs.FS {
	f, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the directory is embedded above
	}
	return f
}()

// page is index.html, which names its scripts and styles by absolute path
// (the console's base), so that every route of the application loads them.
var page = template.Must(template.ParseFS(assets, "assets/index.html"))

// Secure sets the console's security headers on h.
func Secure(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-cache")
}

// Page is where the console is, as the browser sees it, written into the
// page for the application to read.
type Page struct {
	// Root is the path agentbus is served under: "" or, behind a proxy
	// (a publicUrl with a path), that path without a trailing slash.
	Root string
	// Tenant is the tenant whose console this is ("" in single-tenant
	// mode).
	Tenant string
}

// API is the REST API's base path: Root, then /{tenantId} in
// multi-tenant mode.
func (p Page) API() string {
	if p.Tenant == "" {
		return p.Root
	}
	return p.Root + "/" + p.Tenant
}

// Base is the console's path: API, then /console/.
func (p Page) Base() string { return p.API() + Path }

// Serve answers a GET or HEAD for file (the path below the console's base,
// without a leading slash): the asset of that name, or, for any path that
// names no asset and has no file extension (a route of the application,
// such as traces/{id}), the page, with where it is (pg) written into it.
// Anything else is 404; a method other than GET and HEAD is 405.
func Serve(w http.ResponseWriter, r *http.Request, pg Page, file string) {
	Secure(w.Header())
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	file = strings.TrimPrefix(path.Clean("/"+file), "/")
	if file != "" && file != "index.html" {
		if b, err := fs.ReadFile(files, file); err == nil {
			typ := mime.TypeByExtension(path.Ext(file))
			if typ == "" {
				typ = "application/octet-stream"
			}
			w.Header().Set("Content-Type", typ)
			w.WriteHeader(http.StatusOK)
			if r.Method == http.MethodGet {
				_, _ = w.Write(b)
			}
			return
		}
		if path.Ext(file) != "" {
			http.NotFound(w, r)
			return
		}
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, struct{ Base, API, Root, Tenant string }{pg.Base(), pg.API(), pg.Root, pg.Tenant}); err != nil {
		http.Error(w, "console page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(buf.Bytes())
	}
}
