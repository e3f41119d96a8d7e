// Package manifest builds the discovery manifest served at
// /.well-known/agentproto from the operations table.
package manifest

import (
	"github.com/agentbus/agentbus/pkg/transport/rest"
)

// Path is where the discovery manifest is served, relative to the
// endpoint (and, in multi-tenant mode, to /{tenantId} for a tenant's).
const Path = rest.ManifestPath

// Config is what the manifest says beyond the operations table.
type Config struct {
	Name        string
	Description string
	Version     string
	// Endpoint is rest.endpoint: the public base URL, the outermost address.
	Endpoint string
	// OpenAPI is the absolute URL of the OpenAPI document ("rest.openapi").
	OpenAPI     string
	MultiTenant bool
	// Authentication is the manifest's authentication block; nil when no
	// credentials are needed.
	Authentication map[string]any
	// MCP, when set, is the manifest's mcp block.
	MCP *MCP
	// A2A is the a2a block: where the A2A agent card is ("agentCard"; in
	// multi-tenant mode with a {tenantId} segment); nil for none.
	A2A map[string]any
}

// MCP is the manifest's mcp block: the MCP endpoint and whether it pushes
// events. In multi-tenant mode Server holds the {tenantId} segment, filled
// in by ForTenant.
type MCP struct {
	Transport string `json:"transport"` // "streamable-http"
	Server    string `json:"server"`    // absolute URL of the endpoint
	Push      bool   `json:"push"`
}

// Endpoint is one capability endpoint entry.
type Endpoint struct {
	Operation string   `json:"operation"`
	Method    string   `json:"method"`
	Path      string   `json:"path"`
	Tenant    bool     `json:"tenantScoped,omitempty"`
	Query     []string `json:"query,omitempty"`
	// Select is the "name=value" query parameter that picks this
	// operation among those sharing its method and path.
	Select string `json:"select,omitempty"`
	// Stream is the media type the route also answers live in, when the
	// request accepts it: "text/event-stream" (Server-Sent Events).
	Stream string `json:"stream,omitempty"`
}

// Capability groups endpoints with a status: "full" or "partial".
type Capability struct {
	Status    string     `json:"status"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Manifest is the discovery document.
type Manifest struct {
	Name           string                 `json:"name"`
	Description    string                 `json:"description,omitempty"`
	Version        string                 `json:"version,omitempty"`
	REST           map[string]string      `json:"rest"`
	Authentication map[string]any         `json:"authentication,omitempty"`
	MCP            *MCP                   `json:"mcp,omitempty"`
	A2A            map[string]any         `json:"a2a,omitempty"`
	Tenants        map[string]any         `json:"tenants"`
	Capabilities   map[string]*Capability `json:"capabilities"`
}

// Build returns the manifest for the REST endpoints of the operations.
func Build(cfg Config, eps []rest.Endpoint) *Manifest {
	m := &Manifest{
		Name: cfg.Name, Description: cfg.Description, Version: cfg.Version,
		REST:           map[string]string{"endpoint": cfg.Endpoint},
		Authentication: cfg.Authentication,
		MCP:            cfg.MCP,
		A2A:            cfg.A2A,
		Capabilities:   map[string]*Capability{},
	}
	if cfg.OpenAPI != "" {
		m.REST["openapi"] = cfg.OpenAPI
	}
	if cfg.MultiTenant {
		m.Tenants = map[string]any{"mode": "multi", "segment": "{tenantId}",
			"manifest": cfg.Endpoint + "/{tenantId}" + Path}
	} else {
		m.Tenants = map[string]any{"mode": "single"}
	}
	for _, op := range eps {
		c := m.Capabilities[op.Capability]
		if c == nil {
			c = &Capability{Status: "full"}
			m.Capabilities[op.Capability] = c
		}
		if op.Disabled != "" { // switched off by configuration: not offered
			c.Status = "partial"
			continue
		}
		ep := Endpoint{Operation: op.ID, Method: op.Method, Path: op.Path}
		if cfg.MultiTenant {
			ep.Path, ep.Tenant = "/{tenantId}"+op.Path, true
		}
		for _, p := range op.QueryParams() {
			ep.Query = append(ep.Query, p.Name)
		}
		if op.Select[0] != "" {
			ep.Select = op.Select[0] + "=" + op.Select[1]
		}
		if op.Stream != nil {
			ep.Stream = rest.EventStreamType
		}
		c.Endpoints = append(c.Endpoints, ep)
	}
	return m
}
