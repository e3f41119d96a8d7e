package ops

import (
	"context"

	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
)

// SubmitBuiltin queues a built-in command of tenant that agentbus's own
// components send (webhook delivery's DisableSubscription, say): typ at
// its catalogue's latest version, data its data, with source and id as
// given, so that the same source and id again are the same command (its
// receipt answers, nothing is queued twice). It goes the way POST
// /commands goes once a command is checked. data must be valid under the
// type's schema. Errors: the catalogue's for a type or data it does not
// take, else those of the ingest (CONFLICT, PAYLOAD_TOO_LARGE, internal).
// Safe for concurrent use.
func (s *Surface) SubmitBuiltin(ctx context.Context, tenant, source, id, typ string, data any) error {
	entry := s.commandEntry(typ)
	env := &envelope.Envelope{
		SpecVersion: envelope.SpecVersion, ID: id, Source: source, Type: typ, DataContentType: envelope.ContentType,
		DataSchema: entry.Schema + "/" + entry.Version, Time: decide.Stamp(s.now()), Data: decide.MustJSON(data),
	}
	if _, err := s.cat.ResolveCommand(env); err != nil {
		return err
	}
	_, err := s.in.Enqueue(ctx, tenant, env, entry, env.Marshal())
	return err
}

// EventCursor is the cursor of the event at seq of tenant's log, as pages
// and streams show it: a name for the event that shows no sequence of the
// log every tenant shares.
func (s *Surface) EventCursor(tenant string, seq uint64) string {
	return s.reads.Cursor(tenant, false, seq)
}
