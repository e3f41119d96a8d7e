// Package openapi generates agentbus's OpenAPI 3.1 description from the
// operations table: one path item per route, operationId = the operation
// id, the tenant path parameter in multi-tenant mode, the spec's error body,
// and securitySchemes matching the configured authentication. It is served
// at GET /openapi.json without credentials.
package openapi

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/manifest"
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
	// scope; nil when no credentials are needed.
	Security func(scope string) []map[string][]string
	// TokenPath, when set, documents the OAuth2 token endpoint there.
	TokenPath string
}

var paramRE = regexp.MustCompile(`\{([A-Za-z0-9_]+)\}`)

// Build returns the OpenAPI document (JSON-marshalable) for ops.
// Operations switched off by configuration (Disabled) are left out.
func Build(cfg Config, ops []app.Operation) map[string]any {
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
		"responses": map[string]any{"200": jsonResponse("The discovery manifest.", "application/json", object())},
	})
	add(Path, http.MethodGet, map[string]any{
		"operationId": "getOpenAPI", "summary": "This OpenAPI document; needs no credentials.",
		"tags": []string{"discovery"}, "security": public,
		"responses": map[string]any{"200": jsonResponse("The OpenAPI 3.1 document.", "application/json", object())},
	})
	if cfg.MultiTenant {
		add("/{tenantId}"+manifest.Path, http.MethodGet, map[string]any{
			"operationId": "getTenantManifest", "summary": "The discovery manifest of one tenant; needs no credentials.",
			"tags": []string{"discovery"}, "security": public,
			"parameters": []any{map[string]any{"$ref": "#/components/parameters/tenantId"}},
			"responses": map[string]any{"200": jsonResponse("The tenant's discovery manifest.", "application/json", object()),
				"default": errorResponse()},
		})
	}
	if cfg.TokenPath != "" {
		add(cfg.TokenPath, http.MethodPost, tokenOperation())
	}

	for _, op := range ops {
		if op.Disabled != "" {
			continue
		}
		path := op.Path
		var params []any
		if cfg.MultiTenant {
			path = "/{tenantId}" + path
			params = append(params, map[string]any{"$ref": "#/components/parameters/tenantId"})
		}
		for _, m := range paramRE.FindAllStringSubmatch(op.Path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true,
				"schema": map[string]any{"type": "string"}})
		}
		for _, p := range op.Params {
			q := map[string]any{"name": p.Name, "in": "query", "required": false, "description": p.Description,
				"schema": map[string]any{"type": "string"}}
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
		if len(params) > 0 {
			o["parameters"] = params
		}
		if op.HasBody {
			o["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": ref("Envelope")}}}
		}
		if secured {
			o["security"] = cfg.Security(string(op.Scope))
			o["x-agentbus-scope"] = string(op.Scope)
		}
		add(path, op.Method, o)
	}

	components := map[string]any{
		"schemas": map[string]any{"Error": errorSchema(), "Envelope": envelopeSchema(), "TokenResponse": tokenSchema(),
			"OAuthError": oauthErrorSchema()},
	}
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
	info := map[string]any{"title": title, "version": version}
	if cfg.Description != "" {
		info["description"] = cfg.Description
	}
	return map[string]any{
		"openapi":           "3.1.0",
		"jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
		"info":              info,
		"servers":           []any{map[string]any{"url": cfg.Endpoint}},
		"paths":             paths,
		"components":        components,
	}
}

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

func object() map[string]any { return map[string]any{"type": "object"} }

func jsonResponse(desc, ct string, schema map[string]any) map[string]any {
	return map[string]any{"description": desc, "content": map[string]any{ct: map[string]any{"schema": schema}}}
}

func errorResponse() map[string]any {
	return jsonResponse("An error, in the error body.", "application/json", ref("Error"))
}

func responses(op app.Operation, secured bool) map[string]any {
	r := map[string]any{"default": errorResponse()}
	code := op.Success
	if code == 0 {
		code = 200
	}
	key := strconv.Itoa(code)
	if code == http.StatusNoContent {
		r[key] = map[string]any{"description": "Done."}
	} else {
		ct := op.ContentType
		if ct == "" {
			ct = "application/json"
		}
		r[key] = jsonResponse(http.StatusText(code)+".", ct, object())
	}
	if op.HasBody {
		r["400"] = jsonResponse("The request is invalid; details.violations lists every problem.", "application/json", ref("Error"))
	}
	if secured {
		r["401"] = map[string]any{"description": "Credentials are missing or invalid.",
			"content": map[string]any{"application/json": map[string]any{"schema": ref("Error")}}}
		r["403"] = jsonResponse("The credential lacks the scope, or is not valid for the tenant.", "application/json", ref("Error"))
		r["429"] = map[string]any{"description": "Too many requests for this credential.",
			"headers": map[string]any{"Retry-After": map[string]any{"description": "Seconds to wait.",
				"schema": map[string]any{"type": "integer"}}},
			"content": map[string]any{"application/json": map[string]any{"schema": ref("Error")}}}
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

func envelopeSchema() map[string]any {
	str := map[string]any{"type": "string"}
	return map[string]any{
		"type": "object", "additionalProperties": false,
		"required": []string{"specversion", "id", "source", "type", "datacontenttype", "time", "data"},
		"properties": map[string]any{
			"specversion":     map[string]any{"const": "1.0"},
			"id":              str,
			"source":          str,
			"type":            map[string]any{"type": "string", "pattern": "^[A-Z][A-Za-z0-9]*$"},
			"datacontenttype": map[string]any{"const": "application/json"},
			"dataschema":      str,
			"time":            map[string]any{"type": "string", "format": "date-time"},
			"data":            object(),
		},
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
