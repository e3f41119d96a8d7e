package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/golang-jwt/jwt/v5"
)

var authTypes = []string{"bearer", "apikey-header", "apikey-query"}

// TestAuthMethods runs every credential case against each method: the
// right credential, none, wrong, malformed, sent in the wrong place,
// expired, revoked, another tenant's, and without the needed scope.
func TestAuthMethods(t *testing.T) {
	t.Parallel()
	for _, typ := range authTypes {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			s := auStart(t, typ)
			keys := auKeys(t, s)
			rw, _ := auMint(t, keys, "default", auth.ScopeRead, auth.ScopeWrite)
			ro, _ := auMint(t, keys, "default", auth.ScopeRead)
			other, _ := auMint(t, keys, "other", auth.ScopeRead, auth.ScopeWrite)
			revoked, revokedID := auMint(t, keys, "default", auth.ScopeRead)
			auRevoke(t, keys, revokedID, func() bool {
				return auCall(t, typ, "GET", s.URL+"/events", revoked, nil).Status == 401
			})
			forged, _, _ := auth.NewKey() // well formed, never issued
			tampered := rw[:len(rw)-1] + "a"
			if strings.HasSuffix(rw, "a") {
				tampered = rw[:len(rw)-1] + "b"
			}

			events := s.URL + "/events"
			cmd := plJSON(t, placeOrder("o-auth-"+typ))

			// The right credential reads and writes; so does the bootstrap key.
			auExpect(t, "read with key", auCall(t, typ, "GET", events, rw, nil), 200, "")
			auExpect(t, "write with key", auCall(t, typ, "POST", s.URL+"/commands", rw, cmd), 202, "")
			auExpect(t, "bootstrap", auCall(t, typ, "GET", events, auBootstrap, nil), 200, "")

			// No credential, or one that was never issued: 401 in the error body.
			r := auCall(t, typ, "GET", events, "", nil)
			auExpect(t, "no credential", r, 401, "UNAUTHENTICATED")
			if want := map[string]string{"bearer": "Bearer ", "apikey-header": `APIKey realm="agentbus", in="header"`,
				"apikey-query": `APIKey realm="agentbus", in="query"`}[typ]; !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), want) {
				t.Fatalf("401 WWW-Authenticate %q, want %s...", r.Header.Get("WWW-Authenticate"), want)
			}
			for name, cred := range map[string]string{"forged": forged, "tampered": tampered, "garbage": "not-a-key",
				"bootstrap-prefix": auBootstrap[:len(auBootstrap)-1]} {
				r := auCall(t, typ, "GET", events, cred, nil)
				auExpect(t, name, r, 401, "UNAUTHENTICATED")
				if typ == "bearer" && !strings.Contains(r.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
					t.Fatalf("%s: WWW-Authenticate %q", name, r.Header.Get("WWW-Authenticate"))
				}
				if strings.Contains(string(r.Body), cred) {
					t.Fatalf("%s: the error body repeats the credential: %s", name, r.Body)
				}
			}
			// Malformed: the right key in a wrong form, or in a wrong place.
			switch typ {
			case "bearer":
				auExpect(t, "basic scheme", auCall(t, "", "GET", events, "", nil, "Authorization", "Basic "+rw), 401, "UNAUTHENTICATED")
				auExpect(t, "no scheme", auCall(t, "", "GET", events, "", nil, "Authorization", rw), 401, "UNAUTHENTICATED")
				auExpect(t, "key in X-API-Key", auCall(t, "apikey-header", "GET", events, rw, nil), 401, "UNAUTHENTICATED")
			case "apikey-header":
				auExpect(t, "key as bearer", auCall(t, "bearer", "GET", events, rw, nil), 401, "UNAUTHENTICATED")
				auExpect(t, "key in query", auCall(t, "apikey-query", "GET", events, rw, nil), 401, "UNAUTHENTICATED")
				auExpect(t, "key twice", auCall(t, "", "GET", events, "", nil, "X-API-Key", rw+", "+rw), 401, "UNAUTHENTICATED")
			case "apikey-query":
				auExpect(t, "key in header", auCall(t, "apikey-header", "GET", events, rw, nil), 401, "UNAUTHENTICATED")
				auExpect(t, "key twice", auCall(t, "", "GET", events+"?api_key="+rw+"&api_key="+rw, "", nil), 401, "UNAUTHENTICATED")
			}

			// Revoked and expired keys: 401, saying why.
			r = auCall(t, typ, "GET", events, revoked, nil)
			auExpect(t, "revoked", r, 401, "UNAUTHENTICATED")
			if reason := r.JSON(t)["error"].(map[string]any)["details"].(map[string]any)["reason"]; reason != "revoked" {
				t.Fatalf("revoked: reason %v", reason)
			}
			// The expiring key is made right before use, with a margin wide
			// enough for a loaded machine, then outlived.
			const ttl = 3 * time.Second
			expiring, _, err := keys.Create(context.Background(), auth.NewKeyRequest{Tenants: []string{"*"}, Scopes: []auth.Scope{auth.ScopeRead}, TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			made := time.Now()
			auExpect(t, "expiring key before expiry", auCall(t, typ, "GET", events, expiring, nil), 200, "")
			time.Sleep(time.Until(made.Add(ttl + 1100*time.Millisecond)))
			r = auCall(t, typ, "GET", events, expiring, nil)
			auExpect(t, "expired key", r, 401, "UNAUTHENTICATED")
			if reason := r.JSON(t)["error"].(map[string]any)["details"].(map[string]any)["reason"]; reason != "expired" {
				t.Fatalf("expired: reason %v", reason)
			}

			// Valid credentials without the right: 403.
			auExpect(t, "other tenant's key", auCall(t, typ, "GET", events, other, nil), 403, "FORBIDDEN")
			auExpect(t, "read-only key writes", auCall(t, typ, "POST", s.URL+"/commands", ro, cmd), 403, "FORBIDDEN")

			// Public: the manifest and the OpenAPI document.
			auExpect(t, "manifest", get(t, s.URL+"/.well-known/agentproto"), 200, "")
			auExpect(t, "openapi", get(t, s.URL+"/openapi.json"), 200, "")
			// Unknown routes need credentials too.
			auExpect(t, "unknown route, no credential", auCall(t, typ, "GET", s.URL+"/nope", "", nil), 401, "UNAUTHENTICATED")
			auExpect(t, "unknown route", auCall(t, typ, "GET", s.URL+"/nope", rw, nil), 404, "ROUTE_NOT_FOUND")
			auExpect(t, "wrong method, no credential", auCall(t, typ, "PUT", s.URL+"/commands", "", nil), 401, "UNAUTHENTICATED")
			auExpect(t, "wrong method", auCall(t, typ, "PUT", s.URL+"/commands", rw, nil), 405, "METHOD_NOT_ALLOWED")
		})
	}
}

// TestBearerTokens covers tokens used as credentials: issued by the token
// endpoint with a scope subset; expired, forged, unsigned and tokens of a
// revoked key are refused.
func TestBearerTokens(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer")
	keys := auKeys(t, s)
	rw, rwID := auMint(t, keys, "default", auth.ScopeRead, auth.ScopeWrite)
	events := s.URL + "/events"

	full := auToken(t, s.URL, rwID, rw, "")
	auExpect(t, "token reads", auCall(t, "bearer", "GET", events, full, nil), 200, "")
	auExpect(t, "token writes", auCall(t, "bearer", "POST", s.URL+"/commands", full, plJSON(t, placeOrder("o-tok"))), 202, "")
	readOnly := auToken(t, s.URL, rwID, rw, "read")
	r := auCall(t, "bearer", "POST", s.URL+"/commands", readOnly, plJSON(t, placeOrder("o-tok2")))
	auExpect(t, "read token writes", r, 403, "FORBIDDEN")
	if !strings.Contains(r.Header.Get("WWW-Authenticate"), `error="insufficient_scope"`) {
		t.Fatalf("403 WWW-Authenticate %q", r.Header.Get("WWW-Authenticate"))
	}
	boot := auToken(t, s.URL, "bootstrap", auBootstrap, "")
	auExpect(t, "bootstrap token", auCall(t, "bearer", "GET", events, boot, nil), 200, "")

	sign := func(key string, method jwt.SigningMethod, claims jwt.MapClaims) string {
		var k any = []byte(key)
		if method == jwt.SigningMethodNone {
			k = jwt.UnsafeAllowNoneSignatureType
		}
		tok, err := jwt.NewWithClaims(method, claims).SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	now := time.Now()
	claims := func(exp time.Time) jwt.MapClaims {
		return jwt.MapClaims{"iss": s.URL, "aud": s.URL, "sub": rwID, "iat": now.Add(-time.Hour).Unix(), "exp": exp.Unix(),
			"tenants": []string{"*"}, "scope": "read write admin"}
	}
	i := strings.LastIndexByte(full, '.') + 1
	altered := full[:i] + map[bool]string{true: "B", false: "A"}[full[i] == 'A'] + full[i+1:]
	cases := map[string]struct {
		tok, reason string
	}{
		"expired":      {sign(auSigningKey, jwt.SigningMethodHS256, claims(now.Add(-time.Minute))), "expired"},
		"wrong key":    {sign("another-signing-key-0123456789abcdef!!", jwt.SigningMethodHS256, claims(now.Add(time.Hour))), "invalid"},
		"alg none":     {sign("", jwt.SigningMethodNone, claims(now.Add(time.Hour))), "invalid"},
		"wrong issuer": {sign(auSigningKey, jwt.SigningMethodHS256, jwt.MapClaims{"iss": "http://evil", "aud": s.URL, "sub": rwID, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "tenants": []string{"*"}, "scope": "read"}), "invalid"},
		"altered sig":  {altered, "invalid"},
	}
	for name, c := range cases {
		r := auCall(t, "bearer", "GET", events, c.tok, nil)
		auExpect(t, name, r, 401, "UNAUTHENTICATED")
		if got := r.JSON(t)["error"].(map[string]any)["details"].(map[string]any)["reason"]; got != c.reason {
			t.Fatalf("%s: reason %v, want %s", name, got, c.reason)
		}
	}
	// Revoking the key revokes every token issued to it.
	if _, err := keys.Revoke(context.Background(), rwID); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, "token of a revoked key refused", time.Second, func() bool {
		return auCall(t, "bearer", "GET", events, full, nil).Status == 401
	})
}

// TestTokenEndpointErrors checks the OAuth2 error answers of RFC 6749 §5.2.
func TestTokenEndpointErrors(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer")
	keys := auKeys(t, s)
	ro, roID := auMint(t, keys, "default", auth.ScopeRead)
	gone, goneID := auMint(t, keys, "default", auth.ScopeRead)
	tokenURL := s.URL + auth.TokenPath
	form := "application/x-www-form-urlencoded"
	auRevoke(t, keys, goneID, func() bool {
		return do(t, "POST", tokenURL, form, []byte("grant_type=client_credentials&client_secret="+url.QueryEscape(gone))).Status == 401
	})
	basic := func(id, secret string) string {
		req, _ := http.NewRequest("POST", "/", nil)
		req.SetBasicAuth(id, secret)
		return req.Header.Get("Authorization")
	}
	type tc struct {
		ct, body string
		hdr      []string
		status   int
		code     string
	}
	cases := map[string]tc{
		"json body":              {"application/json", `{"grant_type":"client_credentials"}`, []string{"Authorization", basic(roID, ro)}, 400, "invalid_request"},
		"no grant_type":          {form, "", []string{"Authorization", basic(roID, ro)}, 400, "invalid_request"},
		"password grant":         {form, "grant_type=password&username=a&password=b", []string{"Authorization", basic(roID, ro)}, 400, "unsupported_grant_type"},
		"authorization code":     {form, "grant_type=authorization_code&code=x", []string{"Authorization", basic(roID, ro)}, 400, "unsupported_grant_type"},
		"no client auth":         {form, "grant_type=client_credentials", nil, 401, "invalid_client"},
		"wrong secret basic":     {form, "grant_type=client_credentials", []string{"Authorization", basic(roID, "ab_"+strings.Repeat("a", 16)+"_"+strings.Repeat("b", 52))}, 401, "invalid_client"},
		"wrong secret form":      {form, "grant_type=client_credentials&client_id=" + roID + "&client_secret=nope", nil, 401, "invalid_client"},
		"id mismatch":            {form, "grant_type=client_credentials", []string{"Authorization", basic("aaaaaaaaaaaaaaaa", ro)}, 401, "invalid_client"},
		"revoked key":            {form, "grant_type=client_credentials&client_secret=" + url.QueryEscape(gone), nil, 401, "invalid_client"},
		"two auth methods":       {form, "grant_type=client_credentials&client_secret=" + url.QueryEscape(ro), []string{"Authorization", basic(roID, ro)}, 400, "invalid_request"},
		"scope beyond the key":   {form, "grant_type=client_credentials&scope=read+write", []string{"Authorization", basic(roID, ro)}, 400, "invalid_scope"},
		"unknown scope":          {form, "grant_type=client_credentials&scope=root", []string{"Authorization", basic(roID, ro)}, 400, "invalid_scope"},
		"repeated parameter":     {form, "grant_type=client_credentials&grant_type=client_credentials", []string{"Authorization", basic(roID, ro)}, 400, "invalid_request"},
		"bearer is not a client": {form, "grant_type=client_credentials", []string{"Authorization", "Bearer " + ro}, 401, "invalid_client"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := do(t, "POST", tokenURL, c.ct, []byte(c.body), c.hdr...)
			var body struct {
				Error       string `json:"error"`
				Description string `json:"error_description"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil || r.Status != c.status || body.Error != c.code || body.Description == "" {
				t.Fatalf("status %d body %s; want %d %s", r.Status, r.Body, c.status, c.code)
			}
			if r.Header.Get("Cache-Control") != "no-store" {
				t.Fatalf("Cache-Control %q", r.Header.Get("Cache-Control"))
			}
			if c.status == 401 && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Basic ") {
				t.Fatalf("401 without a Basic challenge: %v", r.Header)
			}
		})
	}
	// Parameters belong in the body, not the URL.
	r := do(t, "POST", tokenURL+"?grant_type=client_credentials&client_secret="+url.QueryEscape(ro), form, nil)
	if r.Status != 400 || !strings.Contains(string(r.Body), "invalid_request") {
		t.Fatalf("secret in URL: %d %s", r.Status, r.Body)
	}
	// Success: the standard response, no-store, with form client auth.
	r = do(t, "POST", tokenURL, form, []byte("grant_type=client_credentials&client_id="+roID+"&client_secret="+url.QueryEscape(ro)))
	var ok auth.TokenResponse
	if err := json.Unmarshal(r.Body, &ok); err != nil || r.Status != 200 || ok.TokenType != "Bearer" || ok.Scope != "read" ||
		ok.ExpiresIn < 890 || ok.ExpiresIn > 900 || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("token: %d %s %v", r.Status, r.Body, r.Header)
	}
	if strings.Contains(string(r.Body), ro) {
		t.Fatal("the token response repeats the key")
	}
}

// TestAuthDeclared checks that the manifest's authentication block and the
// OpenAPI securitySchemes say exactly what is configured.
func TestAuthDeclared(t *testing.T) {
	t.Parallel()
	for _, typ := range append([]string{"none"}, authTypes...) {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			s := auStart(t, typ)
			m := get(t, s.URL+"/.well-known/agentproto").JSON(t)
			doc := get(t, s.URL+"/openapi.json").JSON(t)
			block, _ := m["authentication"].(map[string]any)
			comps, _ := doc["components"].(map[string]any)
			schemes, _ := comps["securitySchemes"].(map[string]any)
			post := doc["paths"].(map[string]any)["/commands"].(map[string]any)["post"].(map[string]any)
			switch typ {
			case "none":
				if block != nil || schemes != nil || post["security"] != nil {
					t.Fatalf("auth none declares %v / %v / %v", block, schemes, post["security"])
				}
				return
			case "bearer":
				if block["type"] != "bearer" || block["tokenUrl"] != s.URL+auth.TokenPath {
					t.Fatalf("bearer block %v", block)
				}
				bearer, _ := schemes["bearerAuth"].(map[string]any)
				oauth, _ := schemes["oauth2"].(map[string]any)
				cc, _ := oauth["flows"].(map[string]any)["clientCredentials"].(map[string]any)
				if bearer["type"] != "http" || bearer["scheme"] != "bearer" || cc["tokenUrl"] != s.URL+auth.TokenPath || len(schemes) != 2 {
					t.Fatalf("bearer schemes %v", schemes)
				}
				if doc["paths"].(map[string]any)[auth.TokenPath] == nil {
					t.Fatal("token endpoint not in the OpenAPI document")
				}
			default:
				in := strings.TrimPrefix(typ, "apikey-")
				name := map[string]string{"header": auth.DefaultHeaderScheme, "query": auth.DefaultQueryScheme}[in]
				if block["type"] != "apiKey" || block["in"] != in || block["scheme"] != name || block["tokenUrl"] != nil {
					t.Fatalf("apiKey block %v", block)
				}
				k, _ := schemes["apiKey"].(map[string]any)
				if k["type"] != "apiKey" || k["in"] != in || k["name"] != name || len(schemes) != 1 {
					t.Fatalf("apiKey schemes %v", schemes)
				}
				if r := do(t, "POST", s.URL+auth.TokenPath, "application/x-www-form-urlencoded", []byte("grant_type=client_credentials")); r.Status == 200 {
					t.Fatal("a token endpoint answers though the method is " + typ)
				}
			}
			if post["security"] == nil {
				t.Fatal("submitCommand has no security requirement")
			}
		})
	}
}

// TestCustomScheme: the apiKey header and query names follow auth.scheme.
func TestCustomScheme(t *testing.T) {
	t.Parallel()
	s := auStart(t, "apikey-query", func(c *settings.Config) { c.Auth.Scheme = "access_key" })
	key, _ := auMint(t, auKeys(t, s), "default", auth.ScopeRead)
	if b := get(t, s.URL+"/.well-known/agentproto").JSON(t)["authentication"].(map[string]any); b["scheme"] != "access_key" {
		t.Fatalf("block %v", b)
	}
	auExpect(t, "custom query name", get(t, s.URL+"/events?access_key="+key), 200, "")
	auExpect(t, "default query name", get(t, s.URL+"/events?api_key="+key), 401, "UNAUTHENTICATED")
}

// TestRevocationReachesEveryReplica: two replicas share one NATS; a key
// revoked through either is refused by both within a second, without a
// restart. A token issued by one replica works on the other.
func TestRevocationReachesEveryReplica(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	// Replicas behind one load balancer share publicUrl, the tokens' issuer.
	on := func(c *settings.Config) { c.NATS.URL, c.PublicURL = natsURL, "http://agentbus.test" }
	s1 := auStart(t, "bearer", on, func(c *settings.Config) { c.Auth.TokenSigningKey = "" })
	s2 := auStart(t, "bearer", on, func(c *settings.Config) { c.Auth.TokenSigningKey = "" })
	keys := auKeys(t, s1)
	key, id := auMint(t, keys, "default", auth.ScopeRead)
	for _, s := range []*server.Server{s1, s2} {
		testkit.EventuallyWithin(t, "new key usable", time.Second, func() bool {
			return auCall(t, "bearer", "GET", s.URL+"/events", key, nil).Status == 200
		})
	}
	tok := auToken(t, s1.URL, id, key, "")
	auExpect(t, "token from replica 1 on replica 2", auCall(t, "bearer", "GET", s2.URL+"/events", tok, nil), 200, "")

	if _, err := keys.Revoke(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	// Within a second of the revocation, the key and its token are refused
	// on both replicas.
	testkit.EventuallyWithin(t, "key and token revoked on both replicas", time.Second, func() bool {
		for _, s := range []*server.Server{s1, s2} {
			for _, cred := range []string{key, tok} {
				if auCall(t, "bearer", "GET", s.URL+"/events", cred, nil).Status != 401 {
					return false
				}
			}
		}
		return true
	})
}

// TestRateLimitPerCredential: over the limit a credential gets 429 with
// Retry-After, in the error body; another credential is not affected.
func TestRateLimitPerCredential(t *testing.T) {
	t.Parallel()
	s := auStart(t, "apikey-header", func(c *settings.Config) { c.Limits.Rate = settings.Rate{PerSecond: 0.5, Burst: 3} })
	keys := auKeys(t, s)
	a, _ := auMint(t, keys, "default", auth.ScopeRead)
	b, _ := auMint(t, keys, "default", auth.ScopeRead)
	for i := range 3 {
		auExpect(t, "within the burst "+strconv.Itoa(i), auCall(t, "apikey-header", "GET", s.URL+"/events", a, nil), 200, "")
	}
	r := auCall(t, "apikey-header", "GET", s.URL+"/events", a, nil)
	auExpect(t, "over the limit", r, 429, "RATE_LIMITED")
	ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 2 {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	if d := r.JSON(t)["error"].(map[string]any)["details"].(map[string]any)["retryAfterSeconds"]; d != float64(ra) {
		t.Fatalf("details.retryAfterSeconds %v, header %d", d, ra)
	}
	auExpect(t, "another credential", auCall(t, "apikey-header", "GET", s.URL+"/events", b, nil), 200, "")
}

// TestAuthNoneRefusesNonLoopback: serve with auth none will not listen on a
// non-loopback address unless the operator overrides it, and says so.
func TestAuthNoneRefusesNonLoopback(t *testing.T) {
	t.Parallel()
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "allowInsecureListen") || !strings.Contains(err.Error(), "--auth") {
			t.Fatalf("auth none on %s: %v", what, err)
		}
	}
	cfg := settings.Default()
	cfg.Listen = "0.0.0.0:0"
	cfg.Data = t.TempDir()
	refused(cfg.Listen, cfg.Validate())

	// server.Start refuses too, before it binds anything. Should it not, it
	// could bind nothing real here: the address is TEST-NET-1 and the
	// embedded NATS server has no port.
	startCfg := cfg
	startCfg.Listen = "192.0.2.1:0"
	none := ""
	startCfg.NATS.Listen = &none
	s, err := server.Start(context.Background(), startCfg, nil)
	if err == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = s.Stop(ctx)
		})
	}
	refused("server.Start with "+startCfg.Listen, err)
	cfg.Auth.AllowInsecureListen = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("with the override: %v", err)
	}
	cfg.Auth.AllowInsecureListen = false
	cfg.Auth.Type = "bearer"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("with bearer: %v", err)
	}
}

// TestAuthNone: without authentication every request works as before and
// carries no credential; the manifest declares no authentication block.
func TestAuthNone(t *testing.T) {
	t.Parallel()
	s := auStart(t, "none")
	auExpect(t, "read", get(t, s.URL+"/events"), 200, "")
	auExpect(t, "write", postJSON(t, s.URL+"/commands", placeOrder("o-none")), 202, "")
}

// TestHeadIsGuardedLikeGet: HEAD, which every GET route answers, needs the
// same credential and scope as GET and sends no body.
func TestHeadIsGuardedLikeGet(t *testing.T) {
	t.Parallel()
	s := auStart(t, "apikey-header")
	keys := auKeys(t, s)
	read, _ := auMint(t, keys, "default", auth.ScopeRead)
	admin, _ := auMint(t, keys, "default", auth.ScopeAdmin)
	for _, path := range []string{"/events", "/commands", "/agents", "/events/order-placed/1.0"} {
		for _, c := range []struct {
			cred   string
			status int
		}{{"", 401}, {admin, 403}, {read, 200}} {
			var hdr []string
			if c.cred != "" {
				hdr = []string{auth.DefaultHeaderScheme, c.cred}
			}
			r := head(t, s.URL+path, hdr...)
			if r.Status != c.status || len(r.Body) != 0 {
				t.Errorf("HEAD %s with %q: %d and %d body bytes, want %d and none", path, c.cred, r.Status, len(r.Body), c.status)
			}
		}
	}
	for _, public := range []string{"/.well-known/agentproto", "/openapi.json"} {
		if r := head(t, s.URL+public); r.Status != 200 || len(r.Body) != 0 {
			t.Errorf("HEAD %s: %d, %d body bytes", public, r.Status, len(r.Body))
		}
	}
}
