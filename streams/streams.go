// Package streams embeds the declarative JetStream definitions agentbus
// applies at start and with `agentbus streams apply`. See README.md here.
package streams

import "embed"

// Files holds every *.yaml definition in this directory.
//
//go:embed *.yaml
var Files embed.FS
