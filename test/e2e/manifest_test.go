package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
)

// behindProxy starts a reverse proxy on loopback that serves agentbus under
// the path prefix /api, and agentbus with that as its public URL; it
// returns the server and the public base.
func behindProxy(t *testing.T, mutate ...func(*settings.Config)) (*server.Server, string) {
	t.Helper()
	var target atomic.Pointer[url.URL]
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/api")
		if !ok || !(rest == "" || strings.HasPrefix(rest, "/")) {
			http.NotFound(w, r)
			return
		}
		rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target.Load())
			pr.Out.URL.Path, pr.Out.URL.RawPath = rest, ""
			pr.Out.Host = pr.In.Host
		}, FlushInterval: -1}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	base := proxy.URL + "/api"
	s := start(t, append([]func(*settings.Config){func(c *settings.Config) {
		c.PublicURL = base
		c.Limits.Rate = settings.Rate{}
		c.Catalog.Dirs = []string{"../../config/catalog"}
	}}, mutate...)...)
	u, _ := url.Parse(s.URL)
	target.Store(u)
	return s, base
}

// TestManifestIsCompleteAndTrue walks the discovery manifest behind a proxy
// that serves agentbus under a path prefix, in every authentication mode,
// single- and multi-tenant, with injection on and off. Every expectation
// comes from the operations table or from live answers: the manifest
// declares every operation that is switched on and no other; every
// declared endpoint answers as declared (with the credential it declares;
// without one, 401), live where it says it streams; the MCP endpoint and
// the A2A card it names answer there; the OpenAPI document it links has
// every declared route and security schemes of the declared
// authentication; every URL agentbus emits is under the public base.
func TestManifestIsCompleteAndTrue(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"none", "bearer", "apikey-header", "apikey-query"} {
		for _, multi := range []bool{false, true} {
			if typ == "none" && multi {
				continue // multi-tenant mode needs credentials
			}
			t.Run(fmt.Sprintf("%s/multi=%v", typ, multi), func(t *testing.T) {
				t.Parallel()
				inject := multi // one of each
				mutate := []func(*settings.Config){func(c *settings.Config) {
					c.Auth.Type = typ
					if typ != "none" {
						c.Auth.BootstrapKey = auBootstrap
					}
					c.Events.AllowInjection = inject
				}}
				if multi {
					mutate = append(mutate, auMulti("t1"))
				}
				s, base := behindProxy(t, mutate...)
				cred, credID := "", ""
				if typ != "none" {
					cred, credID = auMint(t, auKeys(t, s), "*", auth.AllScopes...)
				}
				walkManifest(t, s, base, typ, cred, credID, multi, inject)
			})
		}
	}
}

func walkManifest(t *testing.T, s *server.Server, base, typ, cred, credID string, multi, inject bool) {
	r := get(t, base+"/.well-known/agentproto")
	if r.Status != 200 {
		t.Fatalf("manifest through the proxy: %d %s", r.Status, r.Body)
	}
	var m struct {
		REST           map[string]string `json:"rest"`
		MCP            map[string]any    `json:"mcp"`
		A2A            map[string]any    `json:"a2a"`
		Authentication map[string]any    `json:"authentication"`
		Tenants        map[string]any    `json:"tenants"`
		Capabilities   map[string]struct {
			Status    string `json:"status"`
			Endpoints []struct {
				Operation, Method, Path, Select, Stream string
				Tenant                                  bool `json:"tenantScoped"`
				Query                                   []string
			} `json:"endpoints"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatal(err)
	}
	if m.REST["endpoint"] != base {
		t.Fatalf("rest.endpoint %q, want the outermost base %q", m.REST["endpoint"], base)
	}
	tenantBase := base
	if multi {
		tenantBase = base + "/t1"
		tm, _ := m.Tenants["manifest"].(string)
		if !strings.HasPrefix(tm, base+"/") {
			t.Fatalf("tenants.manifest %q is not under %s", tm, base)
		}
		if r := get(t, strings.Replace(tm, "{tenantId}", "t1", 1)); r.Status != 200 {
			t.Fatalf("tenants.manifest: %d", r.Status)
		}
	}
	// The MCP endpoint and the A2A card it names answer there.
	mcpURL, _ := m.MCP["server"].(string)
	mcpURL = strings.Replace(mcpURL, "{tenantId}", "t1", 1)
	if !strings.HasPrefix(mcpURL, base+"/") || m.MCP["push"] != true {
		t.Fatalf("mcp block %v", m.MCP)
	}
	initialize := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"walk","version":"1"}}}`)
	if r := auCall(t, typ, "POST", mcpURL, cred, initialize, "Accept", "application/json, text/event-stream"); r.Status != 200 {
		t.Fatalf("MCP initialize at %s: %d %s", mcpURL, r.Status, r.Body)
	}
	if r := auCall(t, typ, "POST", mcpURL, "", initialize, "Accept", "application/json, text/event-stream"); typ != "none" && r.Status != 401 {
		t.Fatalf("MCP initialize without credentials: %d", r.Status)
	}
	cardURL, _ := m.A2A["agentCard"].(string)
	cardURL = strings.Replace(cardURL, "{tenantId}", "t1", 1)
	card := get(t, cardURL)
	if !strings.HasPrefix(cardURL, base+"/") || card.Status != 200 {
		t.Fatalf("a2a.agentCard %q: %d", cardURL, card.Status)
	}
	var cardDoc struct {
		SupportedInterfaces []struct {
			URL     string `json:"url"`
			Binding string `json:"protocolBinding"`
		} `json:"supportedInterfaces"`
	}
	if err := json.Unmarshal(card.Body, &cardDoc); err != nil || len(cardDoc.SupportedInterfaces) == 0 {
		t.Fatalf("agent card: %v %s", err, card.Body)
	}
	baseURL, _ := url.Parse(base)
	for _, i := range cardDoc.SupportedInterfaces {
		if i.Binding == "GRPC" { // gRPC takes no path: the public host and port
			if i.URL != baseURL.Host {
				t.Fatalf("the agent card's gRPC interface %s is not at %s", i.URL, baseURL.Host)
			}
			continue
		}
		if !strings.HasPrefix(i.URL, tenantBase+"/") {
			t.Fatalf("the agent card's interface %s is not under %s", i.URL, tenantBase)
		}
	}
	// Authentication as configured.
	switch typ {
	case "none":
		if m.Authentication != nil {
			t.Fatalf("authentication declared without auth: %v", m.Authentication)
		}
	case "bearer":
		tokenURL, _ := m.Authentication["tokenUrl"].(string)
		if !strings.HasPrefix(tokenURL, base+"/") {
			t.Fatalf("tokenUrl %q is not under %s", tokenURL, base)
		}
		tok := auToken(t, strings.TrimSuffix(tokenURL, auth.TokenPath), credID, cred, "read")
		if r := auCall(t, typ, "GET", tenantBase+"/events", tok, nil); r.Status != 200 {
			t.Fatalf("a token from tokenUrl: %d %s", r.Status, r.Body)
		}
	}
	// The OpenAPI document it links.
	oa := get(t, m.REST["openapi"])
	if !strings.HasPrefix(m.REST["openapi"], base+"/") || oa.Status != 200 {
		t.Fatalf("rest.openapi %q: %d", m.REST["openapi"], oa.Status)
	}
	var doc struct {
		Servers    []map[string]any                     `json:"servers"`
		Paths      map[string]map[string]map[string]any `json:"paths"`
		Components struct {
			SecuritySchemes map[string]map[string]any `json:"securitySchemes"`
		} `json:"components"`
	}
	if err := json.Unmarshal(oa.Body, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Servers) == 0 || doc.Servers[0]["url"] != base {
		t.Fatalf("OpenAPI servers %v, want %s", doc.Servers, base)
	}
	if declared := m.Authentication; declared != nil {
		found := false
		for _, sc := range doc.Components.SecuritySchemes {
			switch {
			case declared["type"] == "bearer" && sc["scheme"] == "bearer",
				declared["type"] == "apiKey" && sc["type"] == "apiKey" && sc["in"] == declared["in"] && sc["name"] == declared["scheme"]:
				found = true
			}
		}
		if !found {
			t.Fatalf("no OpenAPI security scheme for %v: %v", declared, doc.Components.SecuritySchemes)
		}
	} else if len(doc.Components.SecuritySchemes) != 0 {
		t.Fatalf("security schemes without auth: %v", doc.Components.SecuritySchemes)
	}
	// Every operation switched on is declared, once; no other is.
	var want []string
	partial := map[string]bool{}
	for _, op := range s.Ops.Operations() {
		if op.Disabled != "" {
			partial[op.Capability] = true
			continue
		}
		want = append(want, op.ID)
	}
	var got []string
	sample := map[string]string{"schema": "place-order", "version": "1.0", "id": "no-such-id"}
	for name, c := range m.Capabilities {
		if wantStatus := map[bool]string{true: "partial", false: "full"}[partial[name]]; c.Status != wantStatus {
			t.Errorf("capability %s: status %q, want %q", name, c.Status, wantStatus)
		}
		if name == "events" && (c.Status == "full") != inject {
			t.Errorf("events is %q with injection %v", c.Status, inject)
		}
		for _, ep := range c.Endpoints {
			got = append(got, ep.Operation)
			if multi != ep.Tenant || multi != strings.HasPrefix(ep.Path, "/{tenantId}/") {
				t.Errorf("%s: path %s, tenantScoped %v in multi=%v", ep.Operation, ep.Path, ep.Tenant, multi)
			}
			if _, ok := doc.Paths[ep.Path][strings.ToLower(ep.Method)]; !ok {
				t.Errorf("%s %s is declared but not in the OpenAPI document", ep.Method, ep.Path)
			}
			path := strings.Replace(ep.Path, "{tenantId}", "t1", 1)
			for k, v := range sample {
				path = strings.ReplaceAll(path, "{"+k+"}", v)
			}
			target := base + path
			if ep.Select != "" {
				target += "?" + ep.Select
			}
			var body []byte
			if ep.Method == http.MethodPost {
				body = []byte(`{}`)
			}
			res := auCall(t, typ, ep.Method, target, cred, body)
			if res.Status >= 400 {
				if code := errs.Code(res.errorCode(t)); code == errs.CodeRouteNotFound || code == errs.CodeMethodNotAllowed ||
					code == errs.CodeUnauthenticated || code == errs.CodeForbidden || code == errs.CodeCapabilityNotSupported {
					t.Errorf("%s %s as declared: %d %s", ep.Method, target, res.Status, res.Body)
				}
			}
			if typ != "none" {
				if res := auCall(t, typ, ep.Method, target, "", body); res.Status != 401 {
					t.Errorf("%s %s without credentials: %d", ep.Method, target, res.Status)
				}
			}
			if ep.Stream != "" {
				checkStreams(t, typ, target, cred, ep.Stream)
			}
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("the manifest declares %v;\nthe operations switched on are %v", got, want)
	}
	// URLs agentbus emits are under the public base.
	reg := auCall(t, typ, "POST", tenantBase+"/agents", cred, []byte(`{"id":"m-agent","name":"M"}`))
	if loc := reg.Header.Get("Location"); reg.Status != 201 || !strings.HasPrefix(loc, tenantBase+"/") {
		t.Fatalf("POST agents through the proxy: %d, Location %q", reg.Status, loc)
	}
	cat := auCall(t, typ, "GET", tenantBase+"/commands", cred, nil).JSON(t)
	for _, e := range cat["commands"].([]any) {
		if ds, _ := e.(map[string]any)["dataschema"].(string); ds != "" {
			if !strings.HasPrefix(ds, tenantBase+"/") {
				t.Fatalf("catalogue dataschema %q is not under %s", ds, tenantBase)
			}
			if r := auCall(t, typ, "GET", ds, cred, nil); r.Status != 200 {
				t.Fatalf("GET %s: %d", ds, r.Status)
			}
		}
	}
}

// checkStreams opens target as the live stream an endpoint declares and
// checks it opens with that media type.
func checkStreams(t *testing.T, typ, target, cred, mediaType string) {
	t.Helper()
	target, hdr := auWith(typ, target, cred, "Accept", mediaType)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("stream %s: %v", target, err)
	}
	defer res.Body.Close()
	first := make([]byte, 5)
	_, err = io.ReadFull(res.Body, first)
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), mediaType) || err != nil {
		t.Fatalf("stream %s: %d %s %v", target, res.StatusCode, res.Header.Get("Content-Type"), err)
	}
}
