package config

import "time"

// Push bounds what agentbus pushes to callers as it happens: live event
// streams (GET /events as Server-Sent Events).
type Push struct {
	// Streams bounds the live event streams open at once on one replica
	// (default 1000); StreamsPerCredential those of one credential
	// (default 20). Past either a new stream is refused with 429
	// RATE_LIMITED.
	Streams              int `json:"streams"`
	StreamsPerCredential int `json:"streamsPerCredential"`
	// Heartbeat is how long a stream stays silent before it sends a
	// heartbeat comment, so that proxies keep it open (default 15s).
	Heartbeat Duration `json:"heartbeat"`
	// Queue is how many events a stream holds for a slow reader before it
	// falls behind and reads the log instead (default 256).
	Queue int `json:"queue"`
	// WriteTimeout bounds each write to a stream: a reader that stops
	// reading is closed (default 30s).
	WriteTimeout Duration `json:"writeTimeout"`
}

// DefaultPush is the default bound on push.
var DefaultPush = Push{Streams: 1000, StreamsPerCredential: 20, Heartbeat: Duration(15 * time.Second), Queue: 256,
	WriteTimeout: Duration(30 * time.Second)}

func (c *Config) validatePush(bad func(string, ...any)) {
	p := c.Push
	if p.Streams < 1 || p.Streams > 100_000 {
		bad("push.streams %d: must be 1 to 100000", p.Streams)
	}
	if p.StreamsPerCredential < 1 || p.StreamsPerCredential > p.Streams {
		bad("push.streamsPerCredential %d: must be 1 to push.streams (%d)", p.StreamsPerCredential, p.Streams)
	}
	if d := p.Heartbeat.D(); d < 100*time.Millisecond || d > 5*time.Minute {
		bad("push.heartbeat %s: must be 100ms to 5m", d)
	}
	if p.Queue < 1 || p.Queue > 65536 {
		bad("push.queue %d: must be 1 to 65536", p.Queue)
	}
	if d := p.WriteTimeout.D(); d < time.Second || d > 10*time.Minute {
		bad("push.writeTimeout %s: must be 1s to 10m", d)
	}
}
