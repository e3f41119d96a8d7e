package pushlog

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/google/uuid"
)

// Config bounds the push log. Zero values take the defaults noted.
type Config struct {
	// Commands is how many commands' pushes are kept (default
	// DefaultCommands); PerCommand how many pushes of each (default
	// DefaultPerCommand; more are counted).
	Commands, PerCommand int
	// Flush is how often the pushes recorded here are sent to the other
	// replicas (default 100ms); Batch sends them at once when that many
	// wait (default 128).
	Flush time.Duration
	Batch int
	// Waiting bounds the pushes waiting to be sent (default 4 × Batch):
	// past it, while the sending is stuck, new ones are kept here but not
	// sent (Dropped counts them).
	Waiting int
}

func (c *Config) defaults() {
	if c.Flush <= 0 {
		c.Flush = 100 * time.Millisecond
	}
	if c.Batch <= 0 {
		c.Batch = 128
	}
	if c.Waiting < c.Batch {
		c.Waiting = 4 * c.Batch
	}
}

// Log is the replica's push log: the store of every replica's pushes
// and the sending of its own to the others. Add never blocks on the
// network: it appends under a lock, and Run sends the batches. Safe for concurrent use.
type Log struct {
	cfg     Config
	store   *Store
	wire    bus.Broadcast
	subject string
	origin  string // this replica in its batches, to know its own
	log     *slog.Logger

	mu      sync.Mutex
	waiting []wireRecord
	kick    chan struct{}
	dropped atomic.Uint64
	failing atomic.Bool // the last send failed (logged once until one succeeds)
}

// batch is what a replica sends on the subject.
type batch struct {
	From    string       `json:"from"`
	Records []wireRecord `json:"records"`
}

type wireRecord struct {
	Tenant        string `json:"tenant"`
	CorrelationID string `json:"correlationId"`
	Record
}

// New returns the push log, sending its batches on subject through wire
// (bus.Subjects.Pushed). It sends and takes in nothing before Start.
func New(cfg Config, wire bus.Broadcast, subject string, log *slog.Logger) *Log {
	cfg.defaults()
	return &Log{cfg: cfg, store: NewStore(cfg.Commands, cfg.PerCommand), wire: wire, subject: subject,
		origin: uuid.NewString(), log: log, kick: make(chan struct{}, 1)}
}

// Add records a push made here of tenant's command corr: kept at once,
// sent to the other replicas with the next batch. A push past the
// command's PerCommand records is only counted here, and not sent: what
// goes on the wire is bounded by the commands, not by their listeners.
func (l *Log) Add(tenant, corr string, r Record) {
	if !l.store.add(tenant, corr, r) {
		return
	}
	l.mu.Lock()
	if len(l.waiting) >= l.cfg.Waiting {
		l.mu.Unlock()
		l.dropped.Add(1)
		return
	}
	l.waiting = append(l.waiting, wireRecord{Tenant: tenant, CorrelationID: corr, Record: r})
	full := len(l.waiting) >= l.cfg.Batch
	l.mu.Unlock()
	if full {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// Of returns the pushes of tenant's command corr this replica knows of
// (Store.Of).
func (l *Log) Of(tenant, corr string) ([]Record, int) { return l.store.Of(tenant, corr) }

// Dropped returns how many pushes recorded here were not sent to the
// other replicas: too many waiting, or NATS did not take their batch.
func (l *Log) Dropped() uint64 { return l.dropped.Load() }

// Start takes in the other replicas' batches from now until ctx ends, or
// returns the error of subscribing.
func (l *Log) Start(ctx context.Context) error {
	return l.wire.Subscribe(ctx, l.subject, l.receive)
}

// Run sends the pushes recorded here to the other replicas, every
// Config.Flush or as soon as a batch is full, until ctx ends, after a
// last send.
func (l *Log) Run(ctx context.Context) {
	t := time.NewTicker(l.cfg.Flush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.flush()
			return
		case <-t.C:
		case <-l.kick:
		}
		l.flush()
	}
}

// flush sends what waits, in batches of at most Batch records; a batch
// NATS does not take is dropped and counted.
func (l *Log) flush() {
	l.mu.Lock()
	recs := l.waiting
	l.waiting = nil
	l.mu.Unlock()
	for len(recs) > 0 {
		n := min(len(recs), l.cfg.Batch)
		l.send(recs[:n])
		recs = recs[n:]
	}
}

func (l *Log) send(recs []wireRecord) {
	data, err := json.Marshal(batch{From: l.origin, Records: recs})
	if err == nil {
		err = l.wire.Publish(l.subject, data)
	}
	if err != nil {
		l.dropped.Add(uint64(len(recs)))
		if !l.failing.Swap(true) {
			l.log.Warn("pushes not sent to the other replicas: their traces miss them until sending works again",
				"records", len(recs), "droppedInAll", l.dropped.Load(), "err", err)
		}
		return
	}
	if l.failing.Swap(false) {
		l.log.Info("pushes are sent to the other replicas again", "droppedInAll", l.dropped.Load())
	}
}

// receive keeps the records of another replica's batch; its own, a batch
// larger than Batch, and records no replica makes, are left out.
func (l *Log) receive(data []byte) {
	var b batch
	if err := json.Unmarshal(data, &b); err != nil || b.From == l.origin || len(b.Records) > l.cfg.Batch {
		return // a batch larger than any replica sends is not one of theirs
	}
	for i := range b.Records {
		r := &b.Records[i]
		if valid(r.Tenant, r.CorrelationID, &r.Record) {
			l.store.Add(r.Tenant, r.CorrelationID, r.Record)
		}
	}
}
