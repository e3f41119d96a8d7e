package ops

import (
	"context"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/push"
	"github.com/agentbus/agentbus/pkg/query"
)

// Trace is a command's story as CommandTrace and getTrace answer it: its
// status, its events, its rejection. Transports read it through ops, not
// through the reads beneath.
type Trace = query.Trace

// The statuses of a Trace.
const (
	// StatusAccepted: the command is queued, not yet delivered.
	StatusAccepted = projection.StatusAccepted
	// StatusProcessing: the command was delivered to its processor or
	// agent, with no outcome yet.
	StatusProcessing = query.StatusProcessing
	// StatusProcessed: the command's events are stored.
	StatusProcessed = projection.StatusProcessed
	// StatusRejected: the command was refused (Trace.Rejection says why).
	StatusRejected = projection.StatusRejected
)

// What the transports that follow one command (A2A tasks, MCP sessions)
// need beyond the operations table: completing a typed command's envelope,
// following its events as they are published, and reading its whole story.

// CommandEntries returns the catalogue's command types of the domain
// (catalog.Entry.Domain: what is offered by type), each with its versions
// oldest first, in the catalogue's order.
func (s *Surface) CommandEntries() [][]*catalog.Entry {
	var out [][]*catalog.Entry
	seen := map[string]bool{}
	cat := s.cat.Current() // one catalogue for the whole answer
	for _, e := range cat.Commands() {
		if seen[e.Type] || !e.Domain() {
			continue
		}
		seen[e.Type] = true
		out = append(out, cat.CommandVersions(e.Type))
	}
	return out
}

// SchemaURL returns the absolute URL of a catalogue entry's schema for
// tenant, "" for an untyped entry.
func (s *Surface) SchemaURL(tenant string, kind catalog.Kind, e *catalog.Entry) string {
	if !e.Typed() {
		return ""
	}
	return s.cfg.Schemas.Schema(tenant, kind, e)
}

// FollowCommands opens the bounded feed a transport that follows commands
// reads (push.Hub.Commands): the events of the tenant's commands it
// watches (push.Feed.Watch) as they are published, with a queue of
// StreamConfig.Queue events, the same feed as a live stream of the log
// reads. Without a hub it returns a nil feed, which receives nothing: the
// caller reads the trace.
func (s *Surface) FollowCommands(tenant string) *push.Feed {
	return s.p.Hub.Commands(tenant, s.cfg.Streams.Queue)
}

// Servable reports whether an event the hub handed out can be served as
// it is (query.Reader.Servable): what a transport following a command
// sends of it.
func (s *Surface) Servable(m *bus.Message) bool { return s.reads.Servable(m) }

// CommandTrace returns the trace of tenant's command corr, bounded as
// caller's reads, once the receipts have caught up
// (read.Events.CommandTrace).
func (s *Surface) CommandTrace(ctx context.Context, caller, tenant, corr string) (*Trace, error) {
	return s.events.CommandTrace(ctx, caller, tenant, corr)
}
