package openapi_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/manifest"
	"github.com/agentbus/agentbus/pkg/openapi"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/rest"
)

var table = []rest.Endpoint{
	{Operation: ops.Operation{ID: "submitCommand", Capability: "commands", Scope: ops.ScopeWrite, Body: &ops.Body{Description: "a command envelope"}, Outcomes: []ops.Outcome{ops.Queued}},
		Route: rest.Route{Method: "POST", Path: "/commands"}},
	{Operation: ops.Operation{ID: "getCommandSchema", Capability: "commands", Scope: ops.ScopeRead, ContentType: "application/schema+json",
		Params: []ops.Param{{Name: "schema"}, {Name: "version"}}}, Route: rest.Route{Method: "GET", Path: "/commands/{schema}/{version}"}},
	{Operation: ops.Operation{ID: "listEvents", Capability: "events", Scope: ops.ScopeRead,
		Params: []ops.Param{{Name: "type", Repeated: true}, {Name: "limit"}}}, Route: rest.Route{Method: "GET", Path: "/events"}},
	{Operation: ops.Operation{ID: "injectEvent", Capability: "events", Scope: ops.ScopeAdmin, Body: &ops.Body{Description: "an event envelope"}, Outcomes: []ops.Outcome{ops.Queued}, Disabled: "off"},
		Route: rest.Route{Method: "POST", Path: "/events"}},
	{Operation: ops.Operation{ID: "deleteAgent", Capability: "agents", Scope: ops.ScopeWrite, Outcomes: []ops.Outcome{ops.Empty}, Params: []ops.Param{{Name: "id"}}},
		Route: rest.Route{Method: "DELETE", Path: "/agents/{id}"}},
}

func build(t *testing.T, cfg openapi.Config) map[string]any {
	t.Helper()
	raw, err := json.Marshal(openapi.Build(cfg, table))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestEveryOperationOnce(t *testing.T) {
	t.Parallel()
	for _, multi := range []bool{false, true} {
		doc := build(t, openapi.Config{Endpoint: "https://x.test", MultiTenant: multi})
		if doc["openapi"] != "3.1.0" || doc["servers"].([]any)[0].(map[string]any)["url"] != "https://x.test" {
			t.Fatalf("header: %v", doc)
		}
		paths := doc["paths"].(map[string]any)
		seen := map[string]bool{}
		for path, item := range paths {
			for _, o := range item.(map[string]any) {
				id := o.(map[string]any)["operationId"].(string)
				if seen[id] {
					t.Fatalf("operationId %s twice", id)
				}
				seen[id] = true
				// Every {param} of the path is declared.
				declared := map[string]bool{}
				for _, p := range asList(o.(map[string]any)["parameters"]) {
					pm := p.(map[string]any)
					if ref, ok := pm["$ref"].(string); ok && strings.HasSuffix(ref, "/tenantId") {
						declared["tenantId"] = true
					} else if pm["in"] == "path" {
						declared[pm["name"].(string)] = true
					}
				}
				for _, seg := range strings.Split(path, "/") {
					if strings.HasPrefix(seg, "{") && !declared[strings.Trim(seg, "{}")] {
						t.Fatalf("%s %s: %s not declared", path, id, seg)
					}
				}
				if multi && id != "getManifest" && id != "getOpenAPI" && !strings.HasPrefix(path, "/{tenantId}") {
					t.Fatalf("multi-tenant path without the tenant: %s", path)
				}
			}
		}
		for _, op := range table {
			if seen[op.ID] == (op.Disabled != "") {
				t.Fatalf("%s: present %v, disabled %q", op.ID, seen[op.ID], op.Disabled)
			}
		}
		if multi != seen["getTenantManifest"] {
			t.Fatalf("tenant manifest documented: %v", seen["getTenantManifest"])
		}
	}
}

func TestSecurity(t *testing.T) {
	t.Parallel()
	schemes := map[string]any{"apiKey": map[string]any{"type": "apiKey", "in": "header", "name": "X-API-Key"}}
	doc := build(t, openapi.Config{SecuritySchemes: schemes, Security: func(string) []map[string][]string {
		return []map[string][]string{{"apiKey": {}}}
	}})
	comps := doc["components"].(map[string]any)
	if comps["securitySchemes"].(map[string]any)["apiKey"] == nil {
		t.Fatal("no securitySchemes")
	}
	paths := doc["paths"].(map[string]any)
	post := paths["/commands"].(map[string]any)["post"].(map[string]any)
	if post["security"] == nil || post["responses"].(map[string]any)["401"] == nil {
		t.Fatalf("submitCommand: %v", post)
	}
	man := paths[manifest.Path].(map[string]any)["get"].(map[string]any)
	if s, ok := man["security"].([]any); !ok || len(s) != 0 {
		t.Fatalf("the manifest must need no credentials: %v", man["security"])
	}
	none := build(t, openapi.Config{})
	if none["components"].(map[string]any)["securitySchemes"] != nil {
		t.Fatal("securitySchemes without authentication")
	}
}

// TestTokenEndpoint: the token endpoint's error codes are the ones it
// sends, server_error included.
func TestTokenEndpoint(t *testing.T) {
	t.Parallel()
	doc := build(t, openapi.Config{TokenPath: auth.TokenPath})
	if doc["paths"].(map[string]any)[auth.TokenPath].(map[string]any)["post"] == nil {
		t.Fatal("token endpoint not documented")
	}
	schema := doc["components"].(map[string]any)["schemas"].(map[string]any)["OAuthError"].(map[string]any)
	var codes []string
	for _, c := range schema["properties"].(map[string]any)["error"].(map[string]any)["enum"].([]any) {
		codes = append(codes, c.(string))
	}
	if strings.Join(codes, " ") != strings.Join(auth.OAuthErrorCodes, " ") || !slices.Contains(codes, auth.OAuthServerError) {
		t.Fatalf("OAuth error codes %q", codes)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestBuildLeavesTheTableAlone: the operations table is shared (every
// server in a process builds its document from it, concurrently in
// tests), so Build describes a request body on a copy of its schema.
func TestBuildLeavesTheTableAlone(t *testing.T) {
	t.Parallel()
	schema := map[string]any{"type": "object"}
	eps := []rest.Endpoint{{Operation: ops.Operation{ID: "createThing", Capability: "things", Scope: ops.ScopeWrite,
		Body: &ops.Body{Description: "a thing", Schema: schema}}, Route: rest.Route{Method: "POST", Path: "/things"}}}
	doc := openapi.Build(openapi.Config{Endpoint: "https://x.test"}, eps)
	if len(schema) != 1 {
		t.Fatalf("Build changed the table's schema: %v", schema)
	}
	raw, _ := json.Marshal(doc)
	if !strings.Contains(string(raw), `"description":"a thing"`) {
		t.Fatalf("the request body is not described: %s", raw)
	}
}

// TestProtocolRoutesSecurity: a protocol route that needs credentials
// declares them, with no scope (each message checks its own), and says
// what a refused credential gets; a public one declares none. Without
// authentication the document says no operation needs credentials.
func TestProtocolRoutesSecurity(t *testing.T) {
	t.Parallel()
	routes := []openapi.ProtocolRoute{
		{Method: "POST", Path: "/mcp", OperationID: "mcpPost", Tag: "mcp", Request: "application/json", Response: "application/json"},
		{Method: "GET", Path: "/.well-known/agent-card.json", OperationID: "getAgentCard", Tag: "a2a", Public: true, Response: "application/json"},
	}
	doc := build(t, openapi.Config{Protocols: routes, Security: func(scope string) []map[string][]string {
		return []map[string][]string{{"bearerAuth": {}}, {"oauth2": {scope}}}
	}})
	paths := doc["paths"].(map[string]any)
	mcp := paths["/mcp"].(map[string]any)["post"].(map[string]any)
	raw, _ := json.Marshal(mcp["security"])
	if got, want := string(raw), `[{"bearerAuth":[]},{"oauth2":[]}]`; got != want {
		t.Errorf("POST /mcp security %s, want %s", got, want)
	}
	for _, code := range []string{"401", "403", "429", "4XX"} {
		if mcp["responses"].(map[string]any)[code] == nil {
			t.Errorf("POST /mcp documents no %s answer: %v", code, mcp["responses"])
		}
	}
	card := paths["/.well-known/agent-card.json"].(map[string]any)["get"].(map[string]any)
	if s, ok := card["security"].([]any); !ok || len(s) != 0 {
		t.Errorf("the agent card must need no credentials: %v", card["security"])
	}
	if doc["security"] != nil {
		t.Errorf("root security %v with authentication on", doc["security"])
	}
	if license, _ := doc["info"].(map[string]any)["license"].(map[string]any); license["identifier"] != openapi.License {
		t.Errorf("info.license %v, want %s", license, openapi.License)
	}

	none := build(t, openapi.Config{Protocols: routes})
	if s, ok := none["security"].([]any); !ok || len(s) != 0 {
		t.Errorf("without authentication, root security %v, want []", none["security"])
	}
	if none["paths"].(map[string]any)["/mcp"].(map[string]any)["post"].(map[string]any)["security"] != nil {
		t.Error("without authentication, POST /mcp declares security")
	}
}
