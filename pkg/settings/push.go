package settings

import "time"

// Push bounds what agentbus pushes to callers as it happens: live event
// streams (GET /events as Server-Sent Events) and MCP sessions.
type Push struct {
	// Streams bounds the live event streams open at once on one replica
	// (default 1000); StreamsPerCredential those of one credential
	// (default 20). Past either a new stream is refused with 429
	// RATE_LIMITED.
	Streams              int `json:"streams"`
	StreamsPerCredential int `json:"streamsPerCredential"`
	// Heartbeat is how long a stream stays silent before it sends a
	// heartbeat comment, so that proxies keep it open (default 15s).
	Heartbeat Duration `json:"heartbeat"`
	// Recheck is how often every live stream — SSE, an MCP session's push,
	// an A2A task stream — checks its credential again, however busy it
	// is (default and at most 15s): one that no longer holds (a revoked or
	// expired key, an expired token) ends within Recheck, a bearer token's
	// stream at its expiry.
	Recheck Duration `json:"recheck"`
	// Queue is how many events a stream holds for a slow reader before it
	// falls behind and reads the log instead (default 256).
	Queue int `json:"queue"`
	// WriteTimeout bounds each write to a stream: a reader that stops
	// reading is closed (default 30s).
	WriteTimeout Duration `json:"writeTimeout"`
	// MCP bounds the MCP sessions and what they watch.
	MCP MCPPush `json:"mcp"`
}

// MCPPush bounds the MCP sessions of one replica (pkg/transport/mcp).
type MCPPush struct {
	// Sessions bounds the sessions open at once on one replica (default
	// 1000); SessionsPerCredential those of one credential (default 20).
	// Past either a new session is refused with 429 RATE_LIMITED.
	Sessions              int `json:"sessions"`
	SessionsPerCredential int `json:"sessionsPerCredential"`
	// Watches bounds the commands one session follows (default 100): past
	// it the oldest watch ends. WatchTTL ends a watch that long after it
	// began (default 1h).
	Watches  int      `json:"watches"`
	WatchTTL Duration `json:"watchTTL"`
	// KeepAlive is how often a session is pinged (default 30s); three
	// pings in a row unanswered end it. IdleTimeout ends a session that
	// sent no request that long (default 30m; answered pings count).
	KeepAlive   Duration `json:"keepAlive"`
	IdleTimeout Duration `json:"idleTimeout"`
}

// DefaultPush is the default bound on push.
var DefaultPush = Push{Streams: 1000, StreamsPerCredential: 20, Heartbeat: Duration(15 * time.Second), Recheck: Duration(15 * time.Second), Queue: 256,
	WriteTimeout: Duration(30 * time.Second),
	MCP: MCPPush{Sessions: 1000, SessionsPerCredential: 20, Watches: 100, WatchTTL: Duration(time.Hour),
		KeepAlive: Duration(30 * time.Second), IdleTimeout: Duration(30 * time.Minute)}}

func (c *Config) validatePush(bad func(string, ...any)) {
	p := c.Push
	if p.Streams < 1 || p.Streams > 100_000 {
		bad("push.streams %d: must be 1 to 100000", p.Streams)
	}
	if p.StreamsPerCredential < 1 || p.StreamsPerCredential > p.Streams {
		bad("push.streamsPerCredential %d: must be 1 to push.streams (%d)", p.StreamsPerCredential, p.Streams)
	}
	if d := p.Heartbeat.D(); d < 100*time.Millisecond || d > 5*time.Minute {
		bad("push.heartbeat %s: must be 100ms to 5m", d)
	}
	if d := p.Recheck.D(); d < 100*time.Millisecond || d > 15*time.Second {
		bad("push.recheck %s: must be 100ms to 15s", d)
	}
	if p.Queue < 1 || p.Queue > 65536 {
		bad("push.queue %d: must be 1 to 65536", p.Queue)
	}
	if d := p.WriteTimeout.D(); d < time.Second || d > 10*time.Minute {
		bad("push.writeTimeout %s: must be 1s to 10m", d)
	}
	m := p.MCP
	if m.Sessions < 1 || m.Sessions > 100_000 {
		bad("push.mcp.sessions %d: must be 1 to 100000", m.Sessions)
	}
	if m.SessionsPerCredential < 1 || m.SessionsPerCredential > m.Sessions {
		bad("push.mcp.sessionsPerCredential %d: must be 1 to push.mcp.sessions (%d)", m.SessionsPerCredential, m.Sessions)
	}
	if m.Watches < 1 || m.Watches > 10_000 {
		bad("push.mcp.watches %d: must be 1 to 10000", m.Watches)
	}
	if d := m.WatchTTL.D(); d < time.Second || d > 7*24*time.Hour {
		bad("push.mcp.watchTTL %s: must be 1s to 168h", d)
	}
	if d := m.KeepAlive.D(); d < time.Second || d > 10*time.Minute {
		bad("push.mcp.keepAlive %s: must be 1s to 10m", d)
	}
	if d := m.IdleTimeout.D(); d < 3*m.KeepAlive.D() || d > 24*time.Hour {
		bad("push.mcp.idleTimeout %s: must be 3 × push.mcp.keepAlive to 24h", d)
	}
}
