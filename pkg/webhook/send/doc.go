// Package send is one attempt of a webhook delivery and what follows it:
// the POST of an event to a subscription's URL, signed under the Standard
// Webhooks scheme (Signature, Key) and bounded in time and in what it
// reads of the answer (Sender), and the retry and dead-letter policy, a
// pure function of one attempt (Backoff.Next, RetryAfter). It keeps no
// state between attempts: which event goes next, the cursor, the lease
// and the records are pkg/webhook's.
package send
