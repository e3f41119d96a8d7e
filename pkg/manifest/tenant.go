package manifest

import (
	"maps"
	"strings"
)

// ForTenant returns the manifest of one tenant, served at
// /{tenantId}/.well-known/agentproto in multi-tenant mode: m with the
// {tenantId} segment of every endpoint path filled in and tenants.tenant
// set. m is not changed.
func ForTenant(m *Manifest, tenant string) *Manifest {
	out := *m
	out.Tenants = maps.Clone(m.Tenants)
	if out.Tenants == nil {
		out.Tenants = map[string]any{}
	}
	out.Tenants["tenant"] = tenant
	if m.MCP != nil {
		mcp := *m.MCP
		mcp.Server = strings.Replace(mcp.Server, "{tenantId}", tenant, 1)
		out.MCP = &mcp
	}
	if m.A2A != nil {
		out.A2A = maps.Clone(m.A2A)
		if card, ok := out.A2A["agentCard"].(string); ok {
			out.A2A["agentCard"] = strings.Replace(card, "{tenantId}", tenant, 1)
		}
	}
	out.Capabilities = make(map[string]*Capability, len(m.Capabilities))
	for name, c := range m.Capabilities {
		cc := &Capability{Status: c.Status, Endpoints: make([]Endpoint, len(c.Endpoints))}
		for i, ep := range c.Endpoints {
			ep.Path = strings.Replace(ep.Path, "{tenantId}", tenant, 1)
			cc.Endpoints[i] = ep
		}
		out.Capabilities[name] = cc
	}
	return &out
}
