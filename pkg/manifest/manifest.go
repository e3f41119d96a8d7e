// Package manifest builds the discovery manifest served at
// /.well-known/agentproto from the operations table.
package manifest

import (
	"github.com/agentbus/agentbus/pkg/app"
)

// Path is where the discovery manifest is served, relative to the
// endpoint (and, in multi-tenant mode, to /{tenantId} for a tenant's).
const Path = "/.well-known/agentproto"

// Config is what the manifest says beyond the operations table.
type Config struct {
	Name        string
	Description string
	Version     string
	// Endpoint is rest.endpoint: the public base URL, the outermost address.
	Endpoint    string
	MultiTenant bool
	// Authentication is the manifest's authentication block; nil when no
	// credentials are needed.
	Authentication map[string]any
}

// Endpoint is one capability endpoint entry.
type Endpoint struct {
	Operation string   `json:"operation"`
	Method    string   `json:"method"`
	Path      string   `json:"path"`
	Tenant    bool     `json:"tenantScoped,omitempty"`
	Query     []string `json:"query,omitempty"`
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
	Tenants        map[string]any         `json:"tenants"`
	Capabilities   map[string]*Capability `json:"capabilities"`
}

// Build returns the manifest for ops.
func Build(cfg Config, ops []app.Operation) *Manifest {
	m := &Manifest{
		Name: cfg.Name, Description: cfg.Description, Version: cfg.Version,
		REST:           map[string]string{"endpoint": cfg.Endpoint},
		Authentication: cfg.Authentication,
		Capabilities:   map[string]*Capability{},
	}
	if cfg.MultiTenant {
		m.Tenants = map[string]any{"mode": "multi", "segment": "{tenantId}",
			"manifest": cfg.Endpoint + "/{tenantId}" + Path}
	} else {
		m.Tenants = map[string]any{"mode": "single"}
	}
	for _, op := range ops {
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
		for _, p := range op.Params {
			ep.Query = append(ep.Query, p.Name)
		}
		c.Endpoints = append(c.Endpoints, ep)
	}
	return m
}
