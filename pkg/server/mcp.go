package server

import (
	"net/http"

	"github.com/agentbus/agentbus/pkg/manifest"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/mcp"
	"github.com/agentbus/agentbus/pkg/transport/rest"
	"github.com/labstack/echo/v4"
)

// MCPPath is where the MCP endpoint is served, relative to the endpoint
// (and, in multi-tenant mode, to /{tenantId}).
const MCPPath = "/mcp"

// mcpRoute is the MCP endpoint's route as Echo registers it.
func mcpRoute(multi bool) string {
	if multi {
		return "/:tenantId" + MCPPath
	}
	return MCPPath
}

// mcpBlock is the manifest's mcp block.
func mcpBlock(endpoint string, multi bool) *manifest.MCP {
	server := endpoint + MCPPath
	if multi {
		server = endpoint + "/{tenantId}" + MCPPath
	}
	return &manifest.MCP{Transport: "streamable-http", Server: server, Push: true}
}

// mountMCP serves the MCP transport on e at mcpRoute, for GET, POST and
// DELETE (Streamable HTTP). Its requests pass rest.Authorize as a session
// route (rc.Sessions holds it): authenticated, rate limited, the tenant
// checked; the transport checks each operation's scope. Its sessions end
// when rc.Stop does.
func (s *Server) mountMCP(e *echo.Echo, rc rest.Config, surface *ops.Surface) error {
	pc := s.cfg.Push
	t, err := mcp.New(mcp.Config{Version: Version, BodyLimit: rc.BodyLimit,
		Sessions: pc.MCP.Sessions, SessionsPerCaller: pc.MCP.SessionsPerCredential,
		Watches: pc.MCP.Watches, WatchTTL: pc.MCP.WatchTTL.D(),
		KeepAlive: pc.MCP.KeepAlive.D(), IdleTimeout: pc.MCP.IdleTimeout.D(), WriteTimeout: pc.WriteTimeout.D(),
		Stop: rc.Stop}, surface, s.log)
	if err != nil {
		return err
	}
	s.MCP = t
	e.Match([]string{http.MethodGet, http.MethodPost, http.MethodDelete}, mcpRoute(rc.MultiTenant), func(c echo.Context) error {
		tenant, err := rest.Tenant(c, rc)
		if err != nil {
			return err
		}
		return t.ServeHTTP(c.Response(), c.Request(), mcp.Caller{Tenant: tenant, Caller: rest.Caller(c)})
	})
	return nil
}
