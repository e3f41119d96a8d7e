// Package openapi generates agentbus's OpenAPI 3.1 description from the
// operations table: one path item per route, operationId = the operation
// id, the tenant path parameter in multi-tenant mode, the spec's error body,
// securitySchemes matching the configured authentication, and at least one
// client error (4XX) per operation. It is served at GET /openapi.json
// without credentials.
package openapi

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/manifest"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/rest"
)

// Path is where the document is served, relative to the endpoint.
const Path = "/openapi.json"

// Config is what the document says beyond the operations table.
type Config struct {
	Title, Description, Version string
	// Endpoint is rest.endpoint, the document's only server.
	Endpoint    string
	MultiTenant bool
	// SecuritySchemes is components.securitySchemes; nil when no
	// credentials are needed.
	SecuritySchemes map[string]any
	// Security returns the security requirement of an operation needing
	// scope, or of a protocol route when scope is "" (each of its messages
	// checks its own scope); nil when no credentials are needed.
	Security func(scope string) []map[string][]string
	// TokenPath, when set, documents the OAuth2 token endpoint there.
	TokenPath string
	// Protocols are the routes of the other transports served beside the
	// REST operations (MCP, A2A): each is documented as an entry point,
	// with the error body for what agentbus refuses before the protocol
	// answers.
	Protocols []ProtocolRoute
}

// ProtocolRoute is a route of another transport's protocol (MCP's
// Streamable HTTP, A2A's JSON-RPC, the A2A agent card).
type ProtocolRoute struct {
	Method, Path string // Path relative to the (tenant) base
	OperationID  string
	Summary      string
	Tag          string
	// Public routes need no credentials.
	Public bool
	// Request and Response are the media types of the body sent and of
	// the answer ("" for none).
	Request, Response string
}

// Build returns the OpenAPI document (JSON-marshalable) for the REST
// endpoints of the operations. Operations switched off by configuration
// (Disabled) are left out. An operation that a query parameter selects on
// another's route (listEventCatalog: GET /events?view=catalog) is
// described in that operation, since OpenAPI has one operation per method
// and path.
func Build(cfg Config, eps []rest.Endpoint) map[string]any {
	secured := cfg.Security != nil
	paths := map[string]map[string]any{}
	add := func(path, method string, op map[string]any) {
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		paths[path][strings.ToLower(method)] = op
	}
	public := []map[string][]string{} // explicitly no credentials

	add(manifest.Path, http.MethodGet, map[string]any{
		"operationId": "getManifest", "summary": "The discovery manifest; needs no credentials.",
		"tags": []string{"discovery"}, "security": public,
		"responses": map[string]any{"200": jsonResponse("The discovery manifest.", "application/json", object()),
			"431": headersTooLarge()},
	})
	add(Path, http.MethodGet, map[string]any{
		"operationId": "getOpenAPI", "summary": "This OpenAPI document; needs no credentials.",
		"tags": []string{"discovery"}, "security": public,
		"responses": map[string]any{"200": jsonResponse("The OpenAPI 3.1 document.", "application/json", object()),
			"431": headersTooLarge()},
	})
	if cfg.MultiTenant {
		add("/{tenantId}"+manifest.Path, http.MethodGet, map[string]any{
			"operationId": "getTenantManifest", "summary": "The discovery manifest of one tenant; needs no credentials.",
			"tags": []string{"discovery"}, "security": public,
			"parameters": []any{map[string]any{"$ref": "#/components/parameters/tenantId"}},
			"responses": map[string]any{"200": jsonResponse("The tenant's discovery manifest.", "application/json", object()),
				"404": tenantNotFound(), "default": errorResponse()},
		})
	}
	if cfg.TokenPath != "" {
		add(cfg.TokenPath, http.MethodPost, tokenOperation())
	}
	for _, pr := range cfg.Protocols {
		path, op := pr.Path, map[string]any{"operationId": pr.OperationID, "summary": pr.Summary, "tags": []string{pr.Tag},
			"responses": protocolResponses(pr, cfg)}
		switch {
		case pr.Public:
			op["security"] = public
		case secured:
			op["security"] = anyScope(cfg.Security(""))
		}
		if pr.Request != "" {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{pr.Request: map[string]any{"schema": map[string]any{}}}}
		}
		if cfg.MultiTenant {
			path = "/{tenantId}" + path
			op["parameters"] = []any{map[string]any{"$ref": "#/components/parameters/tenantId"}}
		}
		add(path, pr.Method, op)
	}

	for _, op := range eps {
		if op.Disabled != "" || op.Select[0] != "" {
			continue
		}
		path := op.Path
		var params []any
		if cfg.MultiTenant {
			path = "/{tenantId}" + path
			params = append(params, map[string]any{"$ref": "#/components/parameters/tenantId"})
		}
		for _, name := range op.PathParams() {
			params = append(params, map[string]any{"name": name, "in": "path", "required": true,
				"schema": map[string]any{"type": "string"}})
		}
		for _, p := range op.QueryParams() {
			q := map[string]any{"name": p.Name, "in": "query", "required": false, "description": p.Description,
				"schema": map[string]any{"type": "string"}}
			if len(p.Enum) > 0 {
				q["schema"] = map[string]any{"type": "string", "enum": p.Enum}
			}
			if p.Repeated {
				q["schema"] = map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
				q["style"], q["explode"] = "form", true
			}
			params = append(params, q)
		}
		o := map[string]any{
			"operationId": op.ID, "summary": op.Summary, "tags": []string{op.Capability},
			"responses": responses(op, secured),
		}
		if d := selected(eps, op); d != "" {
			o["description"] = d
		}
		if len(params) > 0 {
			o["parameters"] = params
		}
		if op.Body != nil {
			schema := object()
			if op.Body.Schema != nil {
				schema = op.Body.Schema
			}
			if strings.Contains(op.Body.Description, "envelope") {
				schema = ref("Envelope")
			}
			schema = withDescription(schema, op.Body.Description)
			o["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": schema}}}
		}
		if secured {
			o["security"] = cfg.Security(string(op.Scope))
			o["x-agentbus-scope"] = string(op.Scope)
		}
		add(path, op.Method, o)
	}

	schemas := map[string]any{"Error": errorSchema(), "Envelope": ops.EnvelopeSchema()}
	if cfg.TokenPath != "" {
		schemas["TokenResponse"], schemas["OAuthError"] = tokenSchema(), oauthErrorSchema()
	}
	components := map[string]any{"schemas": schemas}
	if cfg.MultiTenant {
		components["parameters"] = map[string]any{"tenantId": map[string]any{
			"name": "tenantId", "in": "path", "required": true, "description": "The tenant addressed.",
			"schema": map[string]any{"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"}}}
	}
	if len(cfg.SecuritySchemes) > 0 {
		components["securitySchemes"] = cfg.SecuritySchemes
	}
	title := cfg.Title
	if title == "" {
		title = "agentbus"
	}
	version := cfg.Version
	if version == "" {
		version = "dev"
	}
	info := map[string]any{"title": title, "version": version,
		"license": map[string]any{"name": License, "identifier": License}}
	if cfg.Description != "" {
		info["description"] = cfg.Description
	}
	doc := map[string]any{
		"openapi":           "3.1.0",
		"jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
		"info":              info,
		"servers":           []any{map[string]any{"url": cfg.Endpoint}},
		"paths":             paths,
		"components":        components,
	}
	if !secured {
		doc["security"] = public // no operation needs credentials
	}
	return doc
}

// License is the SPDX identifier of agentbus's licence, info.license.
const License = "Apache-2.0"

// anyScope returns the requirement req with its empty scopes dropped: the
// requirement of a route that checks the scope of each message it carries
// rather than one scope for the route.
func anyScope(req []map[string][]string) []map[string][]string {
	out := make([]map[string][]string, 0, len(req))
	for _, r := range req {
		c := make(map[string][]string, len(r))
		for scheme, scopes := range r {
			c[scheme] = slices.DeleteFunc(slices.Clone(scopes), func(s string) bool { return s == "" })
		}
		out = append(out, c)
	}
	return out
}

// protocolResponses are the answers of a protocol route pr: the
// protocol's own, what agentbus refuses before the protocol answers (in
// the error body), and the protocol's own refusals.
func protocolResponses(pr ProtocolRoute, cfg Config) map[string]any {
	r := map[string]any{"200": jsonResponse("The protocol's answer.", pr.Response, map[string]any{}), "default": errorResponse()}
	if cfg.MultiTenant {
		r["404"] = tenantNotFound()
	}
	if pr.Public {
		r["431"] = headersTooLarge()
		return r
	}
	r["4XX"] = map[string]any{
		"description": "Refused: by agentbus before the protocol answers (body size, media type) in the error body, " +
			"or by the protocol's transport (an MCP request without a valid Mcp-Session-Id) in plain text.",
		"content": map[string]any{"application/json": map[string]any{"schema": ref("Error")},
			"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}}}
	if cfg.Security != nil {
		maps.Copy(r, credentialResponses())
		r["403"] = jsonResponse("The credential is not valid for the tenant, or lacks the scope a message needs.", "application/json", ref("Error"))
	}
	return r
}

// credentialResponses are the answers of a route that needs credentials
// when they fail: 401, 403 and 429.
func credentialResponses() map[string]any {
	return map[string]any{
		"401": map[string]any{"description": "Credentials are missing or invalid.",
			"content": map[string]any{"application/json": map[string]any{"schema": ref("Error")}}},
		"403": jsonResponse("The credential lacks the scope, or is not valid for the tenant.", "application/json", ref("Error")),
		"429": map[string]any{"description": "Too many requests for this credential.",
			"headers": map[string]any{"Retry-After": map[string]any{"description": "Seconds to wait.",
				"schema": map[string]any{"type": "integer"}}},
			"content": map[string]any{"application/json": map[string]any{"schema": ref("Error")}}},
	}
}

func tenantNotFound() map[string]any {
	return jsonResponse("TENANT_NOT_FOUND: no such tenant.", "application/json", ref("Error"))
}

// headersTooLarge is the answer of Go's HTTP server to a request whose
// line and header fields pass http.headerBytes, the only client error of
// a public document.
func headersTooLarge() map[string]any {
	return map[string]any{"description": "The request line and header fields are larger than http.headerBytes; in plain text.",
		"content": map[string]any{"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}}}
}

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

func object() map[string]any { return map[string]any{"type": "object"} }

func jsonResponse(desc, ct string, schema map[string]any) map[string]any {
	return map[string]any{"description": desc, "content": map[string]any{ct: map[string]any{"schema": schema}}}
}

func errorResponse() map[string]any {
	return jsonResponse("An error, in the error body.", "application/json", ref("Error"))
}

// selected describes the operations a query parameter selects on op's
// route, or returns "".
func selected(eps []rest.Endpoint, op rest.Endpoint) string {
	var out []string
	for _, o := range eps {
		if o.Select[0] != "" && o.Method == op.Method && o.Path == op.Path && o.Disabled == "" {
			out = append(out, "With "+o.Select[0]+"="+o.Select[1]+" this is "+o.ID+": "+o.Summary)
		}
	}
	return strings.Join(out, " ")
}

// withDescription returns schema described by d. It never changes schema,
// which may belong to the operations table every server shares.
func withDescription(schema map[string]any, d string) map[string]any {
	if _, isRef := schema["$ref"]; isRef {
		return map[string]any{"allOf": []any{schema}, "description": d}
	}
	out := maps.Clone(schema) // the operations' schemas are shared: never written to
	out["description"] = d
	return out
}

func responses(op rest.Endpoint, secured bool) map[string]any {
	r := map[string]any{"default": errorResponse()}
	outcomes := op.Outcomes
	if len(outcomes) == 0 {
		outcomes = []ops.Outcome{ops.Done}
	}
	for _, oc := range outcomes {
		code := rest.Status(oc)
		key := strconv.Itoa(code)
		switch {
		case code == http.StatusNoContent:
			r[key] = map[string]any{"description": "Done."}
		case oc == ops.Queued && op.Outcomes[0] != ops.Queued:
			r[key] = jsonResponse("Accepted: the outcome was not known in time; Location names the command's trace.", "application/json", object())
		default:
			ct := op.ContentType
			if ct == "" {
				ct = "application/json"
			}
			desc := http.StatusText(code) + "."
			if op.Output != "" {
				desc = http.StatusText(code) + ": " + op.Output + "."
			}
			r[key] = jsonResponse(desc, ct, object())
			if op.Stream != nil && code == http.StatusOK {
				r[key].(map[string]any)["content"].(map[string]any)[rest.EventStreamType] = map[string]any{
					"schema": map[string]any{"type": "string", "description": "With Accept: text/event-stream: the same, live, as Server-Sent Events " +
						"(each event's id is its cursor, opaque, as next; Last-Event-ID resumes after it). It starts after the cursor in after (0: the log's start), " +
						"or without one at the log's end: new events only."}}
			}
		}
	}
	// Every operation refuses a query parameter it does not know.
	r["400"] = jsonResponse("The request is invalid; details.violations lists every problem.", "application/json", ref("Error"))
	if secured {
		maps.Copy(r, credentialResponses())
	}
	byStatus := map[string][]string{}
	var order []string
	for _, c := range op.Errors {
		key := strconv.Itoa(errs.StatusOf(c))
		if _, ok := byStatus[key]; !ok {
			order = append(order, key)
		}
		byStatus[key] = append(byStatus[key], string(c))
	}
	for _, key := range order {
		if _, ok := r[key]; !ok {
			r[key] = jsonResponse("Error codes: "+strings.Join(byStatus[key], ", ")+".", "application/json", ref("Error"))
		}
	}
	return r
}

func tokenOperation() map[string]any {
	return map[string]any{
		"operationId": "issueToken", "tags": []string{"auth"}, "security": []map[string][]string{},
		"summary": "OAuth2 client-credentials grant (RFC 6749 §4.4): a short-lived bearer token for an API key.",
		"description": "Client authentication: HTTP Basic (client_id = key id, client_secret = the API key) or the " +
			"client_id and client_secret form fields. Answers follow RFC 6749 §5.1/§5.2, not the agentbus error body.",
		"requestBody": map[string]any{"required": true, "content": map[string]any{
			"application/x-www-form-urlencoded": map[string]any{"schema": map[string]any{
				"type": "object", "required": []string{"grant_type"},
				"properties": map[string]any{
					"grant_type":    map[string]any{"type": "string", "const": "client_credentials"},
					"scope":         map[string]any{"type": "string", "description": "space-separated subset of read write admin"},
					"client_id":     map[string]any{"type": "string"},
					"client_secret": map[string]any{"type": "string"},
				}}}}},
		"responses": map[string]any{
			"200": jsonResponse("A bearer token.", "application/json", ref("TokenResponse")),
			"400": jsonResponse("invalid_request, unsupported_grant_type, invalid_scope or unauthorized_client.", "application/json", ref("OAuthError")),
			"401": jsonResponse("invalid_client.", "application/json", ref("OAuthError")),
			"429": jsonResponse("temporarily_unavailable: too many failed client authentications from this address, or tokens for this client; see Retry-After.", "application/json", ref("OAuthError")),
			"500": jsonResponse("server_error.", "application/json", ref("OAuthError")),
			"503": jsonResponse("server_error: the key store is unavailable; see Retry-After.", "application/json", ref("OAuthError")),
		},
	}
}

func errorSchema() map[string]any {
	return map[string]any{
		"type": "object", "required": []string{"error"},
		"properties": map[string]any{"error": map[string]any{
			"type": "object", "required": []string{"code", "message", "details"},
			"properties": map[string]any{
				"code":    map[string]any{"type": "string", "pattern": "^[A-Z][A-Z0-9_]*$", "examples": []string{"AGENT_NOT_FOUND"}},
				"message": map[string]any{"type": "string"},
				"details": map[string]any{
					"type":        "object",
					"description": "Further detail; empty when there is none. VALIDATION_FAILED lists what is wrong, each problem located by a JSON path or a parameter name.",
					"properties": map[string]any{
						"violations": map[string]any{"type": "array", "items": map[string]any{
							"type": "object", "required": []string{"path", "message"},
							"properties": map[string]any{"path": map[string]any{"type": "string", "examples": []string{"$.data.quantity"}}, "message": map[string]any{"type": "string"}},
						}},
						"violationsOmitted": map[string]any{"type": "integer", "minimum": 1, "description": "violations left out of a long list"},
					},
				},
			},
		}},
	}
}

func tokenSchema() map[string]any {
	return map[string]any{"type": "object", "required": []string{"access_token", "token_type", "expires_in"},
		"properties": map[string]any{
			"access_token": map[string]any{"type": "string"},
			"token_type":   map[string]any{"type": "string", "const": "Bearer"},
			"expires_in":   map[string]any{"type": "integer"},
			"scope":        map[string]any{"type": "string"},
		}}
}

func oauthErrorSchema() map[string]any {
	return map[string]any{"type": "object", "required": []string{"error"},
		"properties": map[string]any{
			"error":             map[string]any{"type": "string", "enum": auth.OAuthErrorCodes},
			"error_description": map[string]any{"type": "string"},
		}}
}
