package settings

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

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

// Memory is the memory agentbus's Go runtime plans for.
type Memory struct {
	// Mode is budget (default) or large-heap. budget: the Go runtime's
	// memory limit is the budget and collections follow the live heap
	// (GOGC 100), so the process stays small and gives memory back after a
	// burst. large-heap: the heap goal is put at the budget whatever the
	// live heap, for fewer collections (a lower latency tail under load on
	// a dedicated box), at the cost of holding about the budget under load.
	Mode string `json:"mode"`
	// Budget in bytes ("384MiB", "2GiB"); 0 is the mode's default: 1
	// GiB, 2 GiB in large-heap mode. Either way the runtime's limit is
	// lowered to three quarters of a container's (cgroup's) memory limit
	// where that is less, and large-heap aims under a quarter of it.
	Budget Size `json:"budget"`
	// Index is the memory of the replica's on-disk read models (the
	// correlation index's history, the type index; pkg/localstore): its
	// block cache and memtables, outside the budget; 0 is
	// DefaultIndexBytes. The copies of the events (Reads.EventCopies)
	// take half as much again.
	Index Size `json:"index"`
}

// Memory modes.
const (
	MemoryBudget    = "budget"
	MemoryLargeHeap = "large-heap"
)

// Default budgets by mode.
const (
	DefaultMemoryBudget   Size = 1 << 30
	DefaultLargeHeapBytes Size = 2 << 30
)

// DefaultIndexBytes is the on-disk read models' memory by default.
const DefaultIndexBytes Size = 48 << 20

// IndexBytes is the on-disk read models' memory: Index, or
// DefaultIndexBytes when it is 0.
func (m Memory) IndexBytes() int64 {
	if m.Index > 0 {
		return int64(m.Index)
	}
	return int64(DefaultIndexBytes)
}

// DefaultMemory is the default memory plan.
var DefaultMemory = Memory{Mode: MemoryBudget}

// Bytes is the budget: Budget, or the mode's default when it is 0.
func (m Memory) Bytes() uint64 {
	switch {
	case m.Budget > 0:
		return uint64(m.Budget)
	case m.Mode == MemoryLargeHeap:
		return uint64(DefaultLargeHeapBytes)
	}
	return uint64(DefaultMemoryBudget)
}

func (c *Config) validateMemory(bad func(string, ...any)) {
	switch c.Memory.Mode {
	case MemoryBudget, MemoryLargeHeap:
	default:
		bad("memory.mode %q: must be budget or large-heap", c.Memory.Mode)
	}
	if b := c.Memory.Budget; b != 0 && (b < 64<<20 || b > 1<<50) {
		bad("memory.budget %s: must be 0 (the mode's default) or 64MiB to 1PiB", b)
	}
	if i := c.Memory.Index; i != 0 && (i < 8<<20 || i > 1<<40) {
		bad("memory.index %s: must be 0 (%s) or 8MiB to 1TiB", i, DefaultIndexBytes)
	}
}

// Size is a number of bytes, written in files as a number or with a
// binary unit: "512KiB", "384MiB", "2GiB".
type Size int64

var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"PiB", 50}, {"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}

// ParseSize reads "384MiB", "2GiB", "1048576" or "0".
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	shift := uint(0)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(t, u.suffix); ok {
			t, shift = strings.TrimSpace(n), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("invalid size %q (use e.g. 384MiB, 2GiB or a number of bytes)", s)
	}
	return Size(n << shift), nil
}

// String writes the size with the largest unit that divides it.
func (s Size) String() string {
	for _, u := range sizeUnits {
		if u.shift > 0 && s != 0 && s%(1<<u.shift) == 0 {
			return strconv.FormatInt(int64(s>>u.shift), 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// UnmarshalJSON takes a number of bytes or a string with a unit.
func (s *Size) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err == nil {
		if n < 0 {
			return fmt.Errorf("invalid size %d: must not be negative", n)
		}
		*s = Size(n)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("invalid size %s (use e.g. 384MiB, 2GiB or a number of bytes)", b)
	}
	v, err := ParseSize(str)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalJSON writes the size as String does.
func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }
