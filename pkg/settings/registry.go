package settings

import "time"

// Registry tunes the agents and services registries.
type Registry struct {
	// WaitTimeout bounds how long a registry write (POST /agents, POST
	// /agents/{id}/pause, ...) waits for its command's outcome; past it the
	// operation answers 202 with the Location of the command's trace
	// (default 5s).
	WaitTimeout Duration `json:"waitTimeout"`
}

// DefaultRegistry is the registry's default configuration.
var DefaultRegistry = Registry{WaitTimeout: Duration(5 * time.Second)}

func (c *Config) validateRegistry(bad func(string, ...any)) {
	if w := c.Registry.WaitTimeout.D(); w < 10*time.Millisecond || w > 5*time.Minute {
		bad("registry.waitTimeout %s: must be 10ms to 5m", w)
	}
}
