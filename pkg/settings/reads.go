package settings

import "time"

// Reads bounds the reads of the event log callers ask for: pages of GET
// /events (view=catalog aside, correlationId lookups included) and traces
// (GET /traces/{id}). A read past a bound is refused at once with 429
// RATE_LIMITED and Retry-After, before it costs anything.
//
// A read is large when it may return more than 100 events (limit and the
// events after its cursor both over 100; for a correlationId lookup or a
// trace, the command's events), or when its filters look through more
// than 10,000 events (the events after its cursor that the type index
// does not hold yet, once per type filter);
// a large read takes a place among the large ones as well, and its time
// is counted against its credential's share of large reads.
type Reads struct {
	// Concurrent bounds the reads running at once in this process, from
	// every caller together (default 16); PerCredential bounds those of
	// one credential (an API key and the tokens issued to it; default 4).
	// Anonymous callers (auth none) are held to Concurrent only.
	Concurrent    int `json:"concurrent"`
	PerCredential int `json:"perCredential"`
	// Large bounds the large reads running at once (default 2), and
	// LargePerCredential those of one credential (default 1).
	Large              int `json:"large"`
	LargePerCredential int `json:"largePerCredential"`
	// LargeShare is the time one credential's large reads may take per
	// second, on average, with a burst of 8 seconds' worth (default 250ms:
	// a quarter of the time). Past it they are refused until the time is
	// made up.
	LargeShare Duration `json:"largeShare"`
	// Connections is how many NATS connections carry the reads, apart
	// from the connection commands, events and consumers use (default 4).
	Connections int `json:"connections"`
	// TypeIndex keeps, on the replica's disk (memory.index), the sequences
	// of each tenant's events by type, so that a page costs what it returns
	// whatever the log's length (default true). Off, pages are read from
	// the log by subject filter, which for rare types means a pass over
	// the tenant's events after the cursor.
	TypeIndex bool `json:"typeIndex"`
	// EventCopies keeps a copy of every event on the replica's disk
	// (<data>/events, with half of memory.index for its memtables and
	// cache), so
	// that reading an old event (a correlationId lookup, a trace, a page
	// through the type index) costs a read of that disk, not of the NATS
	// server's: the server reads a whole block of the log (8 MB) for one
	// old event, and keeps it in memory for a while (default true). On
	// the bench's 10 million orders they took 2,097 MiB of disk beside
	// 7,083 MiB of event stream.
	EventCopies bool `json:"eventCopies"`
}

// DefaultReads is the default bound on reads.
var DefaultReads = Reads{Concurrent: 16, PerCredential: 4, Large: 2, LargePerCredential: 1,
	LargeShare: Duration(250 * time.Millisecond), Connections: 4, TypeIndex: true, EventCopies: true}

func (c *Config) validateReads(bad func(string, ...any)) {
	r := c.Reads
	if r.Concurrent < 1 || r.Concurrent > 4096 {
		bad("reads.concurrent %d: must be 1 to 4096", r.Concurrent)
	}
	if r.PerCredential < 1 || r.PerCredential > r.Concurrent {
		bad("reads.perCredential %d: must be 1 to reads.concurrent (%d)", r.PerCredential, r.Concurrent)
	}
	if r.Large < 1 || r.Large > r.Concurrent {
		bad("reads.large %d: must be 1 to reads.concurrent (%d)", r.Large, r.Concurrent)
	}
	if r.LargePerCredential < 1 || r.LargePerCredential > r.Large || r.LargePerCredential > r.PerCredential {
		bad("reads.largePerCredential %d: must be 1 to reads.large (%d) and reads.perCredential (%d)", r.LargePerCredential, r.Large, r.PerCredential)
	}
	if d := r.LargeShare.D(); d < 10*time.Millisecond || d > time.Second {
		bad("reads.largeShare %s: must be 10ms to 1s (per second)", d)
	}
	if r.Connections < 1 || r.Connections > 64 {
		bad("reads.connections %d: must be 1 to 64", r.Connections)
	}
}
