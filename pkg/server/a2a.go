package server

import (
	"net/http"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/a2a"
	"github.com/agentbus/agentbus/pkg/transport/rest"
	"github.com/labstack/echo/v4"
)

// mountA2A serves the A2A transport (pkg/transport/a2a) on e, beside REST,
// and returns its routes' paths and its gRPC binding, which the server
// serves on the same listener (withGRPC). The A2A transport authenticates
// and checks tenants and scopes itself, as REST does; the REST guard is
// told to let these paths through (mountAuth), and the interop tests
// TestA2ACredentials and TestA2AGRPCCredentials check that they need
// credentials.
func (s *Server) mountA2A(e *echo.Echo, g *auth.Guard, surface *ops.Surface, rc rest.Config) ([]string, http.Handler) {
	cfg := a2a.Config{
		Name: "agentbus", Description: "Event-sourced Agent Service Interface on NATS JetStream: a task per command, an artifact per event.",
		Version: Version, Endpoint: s.cfg.Endpoint(), MultiTenant: rc.MultiTenant,
		Tenants: rc.Tenants, HideTenants: rc.HideTenants, BodyLimit: rc.BodyLimit,
		WaitTimeout: s.cfg.Registry.WaitTimeout.D(), KeepAlive: s.cfg.Push.Heartbeat.D(),
		StreamWriteTimeout: rc.StreamWriteTimeout, Stop: rc.Stop, GRPC: true,
	}
	if g.Method() == auth.MethodBearer {
		cfg.TokenURL = s.cfg.Endpoint() + auth.TokenPath
	}
	t := a2a.New(cfg, surface, g, s.log)
	return t.Mount(e), t.GRPCHandler()
}

// withGRPC routes gRPC calls (HTTP/2 with a gRPC content type) to grpc and
// every other request to h. The server speaks HTTP/2 without TLS
// (protocols) for them: gRPC shares the HTTP listener.
func withGRPC(h, grpc http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a2a.IsGRPC(r) {
			grpc.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// http2Limits bounds what one HTTP/2 connection may hold: at most
// maxStreamsPerConnection requests at once (a connection is what the caps
// per address count), small header tables and receive buffers.
func http2Limits() *http.HTTP2Config {
	return &http.HTTP2Config{MaxConcurrentStreams: maxStreamsPerConnection, MaxDecoderHeaderTableSize: 4096,
		MaxEncoderHeaderTableSize: 4096, MaxReceiveBufferPerConnection: 1 << 20, MaxReceiveBufferPerStream: 256 << 10}
}

// maxStreamsPerConnection is how many requests one HTTP/2 connection may
// have open at once.
const maxStreamsPerConnection = 32

// protocols are the HTTP server's: HTTP/1.1, and HTTP/2 without TLS
// (prior knowledge, as gRPC clients speak it).
func protocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
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
