// Package projection holds agentbus's projections: read models and
// reactions that follow the event stream — the receipts (the correlation
// index), the type index, the agents, services and subscriptions
// registries, the finder of commands not processed yet, and the
// subscription cascade (the agent-consumer reconciler is pkg/reconcile).
// Each projects
// one stored message at a time, idempotently (projecting a message again
// changes nothing), so each can be rebuilt by replaying the stream. It
// talks to storage only through the bus ports.
package projection
