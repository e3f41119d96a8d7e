// Package project holds agentbus's projections: read models and
// reactions that follow the event stream — the receipts (the correlation
// index), the agents, services and subscriptions registries, the
// agent-consumer reconciler, and the subscription cascade. Each projects
// one stored message at a time, idempotently (projecting a message again
// changes nothing), so each can be rebuilt by replaying the stream. It
// talks to storage only through the bus ports.
package project
