package catalog

import (
	"embed"
	"io/fs"
)

// builtinFS holds the control-plane catalogue: agent and service
// registration commands, their events, and CommandRejected. None of its
// commands has a process rule; agentbus's built-in processors handle them.
//
//go:embed builtin
var builtinFS embed.FS

// Builtin returns the embedded control-plane catalogue directory.
func Builtin() fs.FS { sub, _ := fs.Sub(builtinFS, "builtin"); return sub }
