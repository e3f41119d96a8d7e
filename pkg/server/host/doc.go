// Package host tunes the process agentbus runs in to the machine under it:
// the Go runtime's memory limit, GC pacing and GOMAXPROCS (TuneRuntime),
// and the cap on open HTTP connections, which it fits to the process's
// file-descriptor limit (ConnLimiter, MaxConnections). It knows nothing
// of the wiring that uses it.
package host
