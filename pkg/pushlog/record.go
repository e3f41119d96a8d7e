// Package pushlog keeps the pushes of recent commands' events to live
// listeners (SSE streams, MCP sessions, A2A task streams), for their
// traces. Each replica records the pushes its own listeners got, keeps
// them in a bounded store in memory, and tells the other replicas in
// batches over core NATS (bus.Broadcast), so that a trace read on any
// replica lists the pushes of all. Nothing is persisted: a replica that
// starts knows only the pushes made from then on, and a batch lost on the
// way (NATS down, a replica not subscribed yet) is lost. It imports
// nothing of NATS or of a transport.
package pushlog

import (
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
)

// The transports a listener is pushed to through.
const (
	SSE = "sse" // GET /events as Server-Sent Events
	MCP = "mcp" // an MCP session watching the command
	A2A = "a2a" // an A2A task stream of the command
)

// Record is one push of one event to one listener, as a trace lists it.
type Record struct {
	Transport string `json:"transport"` // SSE, MCP or A2A
	EventID   string `json:"eventId"`
	EventType string `json:"eventType"`
	// At is when the write to the listener succeeded.
	At time.Time `json:"at"`
	// Listener names the listener without a secret: the credential that
	// opened an SSE stream or an A2A task stream, "key <id>" (an API key's
	// id, which a command's source shows too) or "anonymous", and
	// "session <hash>" (the first 12 hex digits of the SHA-256 of the MCP
	// session id, never the id itself) for an MCP session.
	Listener string `json:"listener"`
}

// Listener is one live stream as its pushes name it.
type Listener struct {
	Tenant    string
	Transport string // SSE, MCP or A2A
	Label     string // Record.Listener
}

// Bounds of what one record holds: a record received from another
// replica past them is dropped.
const (
	maxLabel = 64
	maxID    = 128
)

// valid reports whether the record of tenant's command corr is one a
// replica makes: a transport named above, ids and labels within their
// bounds. Anyone allowed to publish on the subject can send records.
func valid(tenant, corr string, r *Record) bool {
	switch r.Transport {
	case SSE, MCP, A2A:
	default:
		return false
	}
	return envelope.ValidTenant(tenant) && envelope.ValidTokenID(corr) && !r.At.IsZero() &&
		len(r.EventID) <= maxID && len(r.EventType) <= maxID && len(r.Listener) <= maxLabel
}
