// Package interop_test checks agentbus against third-party tools. The
// OpenAPI document (OpenAPI 3.1, which must be valid under a standard
// validator) is validated by @seriousme/openapi-schema-validator, which
// applies the official OpenAPI 3.1 JSON Schemas, in every authentication
// and tenancy mode that changes the document.
//
// Needs node and the packages of package-lock.json:
//
//	npm ci --prefix test/interop
//
// Without them the test fails, unless AGENTBUS_SKIP_INTEROP=1.
package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

const (
	validator     = "validate-openapi.mjs"
	validatorPkg  = "node_modules/@seriousme/openapi-schema-validator/package.json"
	skipEnv       = "AGENTBUS_SKIP_INTEROP"
	installAdvice = "run `npm ci --prefix test/interop` from the repository root (needs node and npm), " +
		"or set " + skipEnv + "=1 to skip the interop tests"
)

// requireNode returns the node binary, failing (or, with
// AGENTBUS_SKIP_INTEROP=1, skipping) when node or the validator is missing.
func requireNode(t *testing.T) string {
	t.Helper()
	var missing string
	node, err := exec.LookPath("node")
	switch {
	case err != nil:
		missing = "node is not installed (not in PATH)"
	default:
		if _, err := os.Stat(validatorPkg); err != nil {
			missing = "test/interop/node_modules lacks @seriousme/openapi-schema-validator"
		}
	}
	if missing == "" {
		return node
	}
	if os.Getenv(skipEnv) == "1" {
		t.Skipf("skipping the OpenAPI interop test: %s (%s=1)", missing, skipEnv)
	}
	t.Fatalf("%s: %s", missing, installAdvice)
	return ""
}

// startAgentbus runs agentbus in-process on a fresh embedded store.
func startAgentbus(t *testing.T, mutate func(*settings.Config)) *server.Server {
	t.Helper()
	opts := []func(*settings.Config){testkit.NoNATSPort}
	if mutate != nil {
		opts = append(opts, mutate)
	}
	return testkit.Agentbus(t, opts...)
}

// validate runs the validator on doc and returns its output and whether
// it accepted the document.
// servedOpenAPI returns the OpenAPI document s serves, asked for without
// credentials: it is public in every mode.
func servedOpenAPI(t *testing.T, s *server.Server) []byte {
	t.Helper()
	res, err := http.Get(s.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.json without credentials: %d %s", res.StatusCode, raw)
	}
	return raw
}

func validate(t *testing.T, node string, doc []byte) (string, bool) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, validator, file)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		if _, exit := err.(*exec.ExitError); !exit {
			t.Fatalf("run node %s: %v\n%s", validator, err, out.String())
		}
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			t.Fatalf("node %s exited %d (not a validation failure):\n%s", validator, code, out.String())
		}
	}
	return out.String(), err == nil
}

func TestOpenAPIValidates(t *testing.T) {
	node := requireNode(t)
	const tenants = "acme"
	cases := []struct {
		name   string
		mutate func(*settings.Config)
		// schemes are the securitySchemes the document must declare,
		// name → "type in name" (in and name for apiKey only).
		schemes map[string]string
		multi   bool
		inject  bool // POST /events is documented
	}{
		{name: "none"},
		{name: "bearer", mutate: authType("bearer"),
			schemes: map[string]string{"bearerAuth": "http", "oauth2": "oauth2"}},
		{name: "apikey-header", mutate: authType("apikey-header"),
			schemes: map[string]string{"apiKey": "apiKey header X-API-Key"}},
		{name: "apikey-header custom scheme", mutate: func(c *settings.Config) {
			authType("apikey-header")(c)
			c.Auth.Scheme = "X-Agentbus-Key"
		}, schemes: map[string]string{"apiKey": "apiKey header X-Agentbus-Key"}},
		{name: "apikey-query", mutate: authType("apikey-query"),
			schemes: map[string]string{"apiKey": "apiKey query api_key"}},
		{name: "multi-tenant bearer", multi: true, mutate: func(c *settings.Config) {
			authType("bearer")(c)
			c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{tenants}
		}, schemes: map[string]string{"bearerAuth": "http", "oauth2": "oauth2"}},
		{name: "multi-tenant apikey-query open tenants event injection", multi: true, inject: true, mutate: func(c *settings.Config) {
			authType("apikey-query")(c)
			c.Tenancy.Mode, c.Tenancy.Open = "multi", true
			c.Events.AllowInjection = true
		}, schemes: map[string]string{"apiKey": "apiKey query api_key"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startAgentbus(t, tc.mutate)
			raw := servedOpenAPI(t, s)
			out, ok := validate(t, node, raw)
			if !ok {
				t.Fatalf("GET /openapi.json is not a valid OpenAPI 3.1 document:\n%s", out)
			}
			t.Log(strings.TrimSpace(out))
			checkDocument(t, s, raw, tc.schemes, tc.multi, tc.inject)
		})
	}
}

func authType(typ string) func(*settings.Config) {
	return func(c *settings.Config) { c.Auth.Type = typ }
}

// checkDocument checks what the README says the document tells: the
// configured endpoint, exactly the configured securitySchemes (with the
// token endpoint for bearer), tenant-scoped paths in multi mode, and
// POST /events only when event injection is on.
func checkDocument(t *testing.T, s *server.Server, raw []byte, schemes map[string]string, multi, inject bool) {
	t.Helper()
	var doc struct {
		OpenAPI string `json:"openapi"`
		Servers []struct {
			URL string `json:"url"`
		} `json:"servers"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			SecuritySchemes map[string]struct {
				Type  string `json:"type"`
				In    string `json:"in"`
				Name  string `json:"name"`
				Flows struct {
					ClientCredentials struct {
						TokenURL string `json:"tokenUrl"`
					} `json:"clientCredentials"`
				} `json:"flows"`
			} `json:"securitySchemes"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != s.URL {
		t.Errorf("servers %+v, want the one endpoint %s", doc.Servers, s.URL)
	}
	got := map[string]string{}
	for name, sc := range doc.Components.SecuritySchemes {
		got[name] = strings.TrimSpace(strings.Join([]string{sc.Type, sc.In, sc.Name}, " "))
		if sc.Type == "oauth2" {
			if want := s.URL + "/oauth/token"; sc.Flows.ClientCredentials.TokenURL != want {
				t.Errorf("oauth2 tokenUrl %q, want %q", sc.Flows.ClientCredentials.TokenURL, want)
			}
			if _, ok := doc.Paths["/oauth/token"]["post"]; !ok {
				t.Errorf("bearer: the token endpoint POST /oauth/token is not in the document")
			}
		}
	}
	if len(got) != len(schemes) {
		t.Errorf("securitySchemes %v, want %v", got, schemes)
	}
	for name, want := range schemes {
		if got[name] != want {
			t.Errorf("securitySchemes %v, want %v", got, schemes)
			break
		}
	}
	events := "/events"
	if multi {
		events = "/{tenantId}/events"
	}
	if _, ok := doc.Paths[events]["post"]; ok != inject {
		t.Errorf("POST %s documented: %v, want %v (event injection on: %v)", events, ok, inject, inject)
	}
	if multi {
		public := map[string]bool{"/.well-known/agentproto": true, "/openapi.json": true, "/oauth/token": true}
		for p := range doc.Paths {
			if !public[p] && !strings.HasPrefix(p, "/{tenantId}/") {
				t.Errorf("multi-tenant: path %s is not under /{tenantId}", p)
			}
		}
		if _, ok := doc.Paths["/{tenantId}/events"]; !ok {
			t.Errorf("multi-tenant: no /{tenantId}/events path")
		}
	}
}

// TestValidatorRejectsInvalid makes sure the validator run by
// TestOpenAPIValidates really fails on an invalid document.
func TestValidatorRejectsInvalid(t *testing.T) {
	node := requireNode(t)
	for name, doc := range map[string]string{
		"no info.version": `{"openapi":"3.1.0","info":{"title":"x"},"paths":{}}`,
		"OpenAPI 3.0":     `{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{}}`,
		"dangling $ref": `{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{"/a":{"get":{"operationId":"a",` +
			`"responses":{"200":{"$ref":"#/components/responses/missing"}}}}}}`,
		"duplicate operationId": `{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{"/a":{` +
			`"get":{"operationId":"a","responses":{"200":{"description":"x"}}},` +
			`"post":{"operationId":"a","responses":{"200":{"description":"x"}}}}}}`,
		"undeclared path parameter": `{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{"/a/{id}":{` +
			`"get":{"responses":{"200":{"description":"x"}}}}}}`,
		"path parameter without name": `{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{"/a/{id}":{` +
			`"get":{"parameters":[{"in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"x"}}}}}}`,
	} {
		if out, ok := validate(t, node, []byte(doc)); ok {
			t.Errorf("%s: the validator accepts an invalid document:\n%s", name, out)
		}
	}
	if out, ok := validate(t, node, []byte(`{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{}}`)); !ok {
		t.Errorf("the validator rejects a minimal valid document:\n%s", out)
	}
}
