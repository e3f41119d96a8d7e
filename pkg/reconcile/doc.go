// Package reconcile is the agent-consumer reconciler: for every agent
// event it makes the agent's durable consumer on the command log match the
// agent's latest state, reading the receipts, the agents registry and the
// pending commands that pkg/projection keeps. Failures that may pass are
// retried off the control consumer; those that cannot are recorded in the
// event log. It talks to storage only through the bus ports.
package reconcile
