package server

import (
	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/a2a"
	"github.com/agentbus/agentbus/pkg/transport/rest"
	"github.com/labstack/echo/v4"
)

// mountA2A serves the A2A transport (pkg/transport/a2a) on e, beside REST,
// and returns its routes' paths. The A2A transport authenticates and
// checks tenants and scopes itself, as REST does; the REST guard is told
// to let these paths through (mountAuth), and the interop test
// TestA2ACredentials checks that they need credentials.
func (s *Server) mountA2A(e *echo.Echo, g *auth.Guard, surface *ops.Surface, rc rest.Config) []string {
	cfg := a2a.Config{
		Name: "agentbus", Description: "Event-sourced Agent Service Interface on NATS JetStream: a task per command, an artifact per event.",
		Version: Version, Endpoint: s.cfg.Endpoint(), MultiTenant: rc.MultiTenant,
		Tenants: rc.Tenants, HideTenants: rc.HideTenants, BodyLimit: rc.BodyLimit,
		WaitTimeout: s.cfg.Registry.WaitTimeout.D(), KeepAlive: s.cfg.Push.Heartbeat.D(),
		StreamWriteTimeout: rc.StreamWriteTimeout, Stop: rc.Stop,
	}
	if g.Method() == auth.MethodBearer {
		cfg.TokenURL = s.cfg.Endpoint() + auth.TokenPath
	}
	return a2a.New(cfg, surface, g, s.log).Mount(e)
}

// a2aBlock is the discovery manifest's a2a block: where the agent card is
// (in multi-tenant mode, with the {tenantId} segment to fill in).
func a2aBlock(endpoint string, multi bool) map[string]any {
	card := endpoint + a2a.CardPath
	if multi {
		card = endpoint + "/{tenantId}" + a2a.CardPath
	}
	return map[string]any{"agentCard": card, "protocolVersions": []string{"1.0", "0.3"}}
}
