package config

import "time"

// HTTP bounds what HTTP clients may hold of the server: connections, time
// and header bytes. Over a connection limit a new connection is answered
// 503 SERVICE_UNAVAILABLE (Retry-After) and closed, except that at
// MaxConnections the connection idle longest is closed instead when there
// is one.
type HTTP struct {
	// MaxConnections caps the open HTTP connections (default 4096). It is
	// lowered at start, and logged, to three quarters of the process's
	// file-descriptor limit where that is less.
	MaxConnections int `json:"maxConnections"`
	// MaxConnectionsPerAddress caps the connections of one client address
	// (an IPv6 client's /64); 0 turns the cap off, as behind a proxy
	// whose connections all come from one address (default 512).
	MaxConnectionsPerAddress int `json:"maxConnectionsPerAddress"`
	// HeaderBytes caps a request's line and header fields; larger is
	// answered 431 (default 32 KiB, 4 KiB to 1 MiB).
	HeaderBytes int `json:"headerBytes"`
	// ReadHeaderTimeout bounds the reading of a request's header, the
	// first one's from the connection's start (default 10s).
	ReadHeaderTimeout Duration `json:"readHeaderTimeout"`
	// ReadTimeout bounds the reading of a whole request, body included
	// (default 30s).
	ReadTimeout Duration `json:"readTimeout"`
	// WriteTimeout bounds a request from the end of its header to the end
	// of its answer, so a client that does not read its answers cannot
	// hold a connection; more than registry.waitTimeout (default 60s).
	WriteTimeout Duration `json:"writeTimeout"`
	// IdleTimeout closes a keep-alive connection with no request for this
	// long (default 60s). A request that fails authentication closes its
	// connection at once.
	IdleTimeout Duration `json:"idleTimeout"`
}

// DefaultHTTP is the HTTP server's default configuration.
var DefaultHTTP = HTTP{
	MaxConnections: 4096, MaxConnectionsPerAddress: 512, HeaderBytes: 32 << 10,
	ReadHeaderTimeout: Duration(10 * time.Second), ReadTimeout: Duration(30 * time.Second),
	WriteTimeout: Duration(60 * time.Second), IdleTimeout: Duration(60 * time.Second),
}

func (c *Config) validateHTTP(bad func(string, ...any)) {
	h := c.HTTP
	if h.MaxConnections < 16 {
		bad("http.maxConnections %d: must be at least 16", h.MaxConnections)
	}
	if h.MaxConnectionsPerAddress < 0 || h.MaxConnectionsPerAddress > h.MaxConnections {
		bad("http.maxConnectionsPerAddress %d: must be 0 (no cap) to http.maxConnections", h.MaxConnectionsPerAddress)
	}
	if h.HeaderBytes < 4<<10 || h.HeaderBytes > 1<<20 {
		bad("http.headerBytes %d: must be 4096 to 1048576", h.HeaderBytes)
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{{"readHeaderTimeout", h.ReadHeaderTimeout.D()}, {"readTimeout", h.ReadTimeout.D()}, {"writeTimeout", h.WriteTimeout.D()}, {"idleTimeout", h.IdleTimeout.D()}} {
		if d.d < 100*time.Millisecond || d.d > time.Hour {
			bad("http.%s %s: must be 100ms to 1h", d.key, d.d)
		}
	}
	if h.ReadHeaderTimeout > h.ReadTimeout {
		bad("http.readHeaderTimeout %s: must not be more than http.readTimeout (%s)", h.ReadHeaderTimeout.D(), h.ReadTimeout.D())
	}
	if w := c.Registry.WaitTimeout.D(); h.WriteTimeout.D() <= w {
		bad("http.writeTimeout %s: must be more than registry.waitTimeout (%s), or a write's answer could not be sent", h.WriteTimeout.D(), w)
	}
}
