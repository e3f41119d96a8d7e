package natsjs

// WebhookNames are the buckets and stream of webhook delivery
// (streams/60-webhooks.yaml).
type WebhookNames struct {
	State, Deliveries, DeadLetters string
}

// WebhookNamesFor returns the names the stream files produce for prefix.
func WebhookNamesFor(prefix string) WebhookNames {
	p := upperPrefix(prefix)
	return WebhookNames{State: p + "_WEBHOOKS", Deliveries: p + "_DELIVERIES", DeadLetters: p + "_DEADLETTER"}
}
