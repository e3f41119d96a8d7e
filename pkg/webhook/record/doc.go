// Package record keeps the records of webhook deliveries: one per event
// and subscription, its attempts newest last, in a KV bucket with a TTL
// (Deliveries), so a command's trace and a subscription's list of
// deliveries each read one key pattern. A record holds no secret and at
// most the first KiB of each answer. Only the worker delivering the
// subscription (pkg/webhook) writes its records.
package record
