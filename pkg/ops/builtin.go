package ops

import "context"

// SubmitBuiltin queues a built-in command of tenant that agentbus's own
// components send (webhook delivery's DisableSubscription, say), with
// source and id as given, so that the same source and id again are the
// same command: see command.Submit.Builtin.
func (s *Surface) SubmitBuiltin(ctx context.Context, tenant, source, id, typ string, data any) error {
	return s.p.Submit.Builtin(ctx, tenant, source, id, typ, data)
}

// EventCursor is the cursor of the event at seq of tenant's log, as pages
// and streams show it: a name for the event that shows no sequence of the
// log every tenant shares.
func (s *Surface) EventCursor(tenant string, seq uint64) string {
	return s.reads.Cursor(tenant, false, seq)
}
