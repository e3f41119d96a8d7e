// Package webhook delivers events to webhook subscriptions: signed under
// the Standard Webhooks scheme, one event at a time per subscription in
// stream order, retried on a schedule, dead-lettered after the last retry.
//
// Every replica runs a Dispatcher. A subscription is delivered by the
// replica that holds its lease (a key of the state bucket taken and
// renewed by compare-and-set), from its cursor (the last event settled,
// in the same bucket, written at most every 100 ms), so no two replicas
// deliver one subscription at once (a worker stops before its lease could
// have passed on) and a replica that dies mid-delivery is replaced within
// the lease's lifetime, repeating at most what it delivered since its
// cursor was last written (same webhook-ids). Nothing is queued in memory:
// a worker reads a bounded run of events ahead (one while retrying) — from
// the replica's window of the latest events it followed (4,096 events, 8
// MiB at most, shared by its workers) when that holds them, else from the
// log — and a receiver that is down for hours holds back only its own
// subscription's cursor. Delivery records are sent without waiting for
// each; a cursor is written only once the records of the deliveries it
// passes are stored. The package talks to storage through the bus ports
// and to receivers through the http.Client it is given (pkg/egress's
// guarded client in agentbus). One attempt and the retry policy are
// pkg/webhook/send's; the delivery records pkg/webhook/record's.
package webhook
