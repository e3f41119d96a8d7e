package settings

import "net"

// Ops is the operations listener (pkg/opsport): liveness and readiness
// probes, the Prometheus exposition and, when asked for, the Go profiler,
// apart from the API and without credentials.
type Ops struct {
	// Listen is its address (default 127.0.0.1:8081); never the API's.
	Listen string `json:"listen"`
	// Pprof serves /debug/pprof/ on it (default off).
	Pprof bool `json:"pprof"`
	// Metrics keeps agentbus's metrics and serves them at /metrics
	// (default on). Off, nothing is counted or timed, and /metrics
	// answers 404.
	Metrics bool `json:"metrics"`
}

// DefaultOps is the operations listener's default.
var DefaultOps = Ops{Listen: "127.0.0.1:8081", Metrics: true}

func (c *Config) validateOps(bad func(string, ...any)) {
	if !hostPort(c.Ops.Listen) {
		bad("ops.listen %q: must be host:port", c.Ops.Listen)
		return
	}
	if sameAddress(c.Ops.Listen, c.Listen) {
		bad("ops.listen %q: must not be the API's listen address (listen %q); the operations listener needs a port of its own", c.Ops.Listen, c.Listen)
	}
}

// sameAddress reports whether host:port addresses a and b name the same
// fixed port on the same host (port 0, any free port, never collides).
func sameAddress(a, b string) bool {
	ah, ap, err1 := net.SplitHostPort(a)
	bh, bp, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || ap != bp || ap == "0" {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ah == bh || wild(ah) || wild(bh) || (isLoopbackName(ah) && isLoopbackName(bh))
}

func isLoopbackName(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
