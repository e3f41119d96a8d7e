// Package streams embeds the declarative JetStream definitions agentbus
// applies at start (`agentbus serve`); `agentbus streams apply` applies the
// streams and buckets, not the consumers. See README.md here.
package streams

import "embed"

// Files holds every *.yaml definition in this directory.
//
//go:embed *.yaml
var Files embed.FS
