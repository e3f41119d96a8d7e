package natsjs

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reads that callers ask for (pages of the event log, traces) go through
// connections of their own, never the one commands, events, receipts and
// consumers use: the server answers a batched read on the connection that
// asked, inline in that connection's read loop, and a batch of large
// messages fills that connection's outbound buffer. On a shared connection
// a flood of reads queued the processor's publishes and acks behind it, and
// could have the server cut the connection as a slow consumer, taking the
// processing down with it. On their own connections reads wait only for
// each other, and a cut read connection fails reads only (503) while it
// reconnects.

// readConn is one connection reads go through and the reads on it now.
type readConn struct {
	nc   *nats.Conn
	busy atomic.Int32
}

// takeRead picks the least busy of conns, counts a read on it, and returns
// it with the function that ends the read.
func takeRead(conns []*readConn) (*readConn, func()) {
	best := conns[0]
	for _, c := range conns[1:] {
		if c.busy.Load() < best.busy.Load() {
			best = c
		}
	}
	best.busy.Add(1)
	return best, func() { best.busy.Add(-1) }
}

// DefaultReadConns is how many connections Connect opens for reads when
// Config.ReadConns is 0.
const DefaultReadConns = 4

// dialReads opens n connections for reads with opts, named name-reads.
func dialReads(url string, opts []nats.Option, name string, n int) ([]*readConn, error) {
	out := make([]*readConn, 0, n)
	for range n {
		o := append(append([]nats.Option{}, opts...), nats.Name(name+"-reads"))
		nc, err := nats.Connect(url, o...)
		if err != nil {
			for _, c := range out {
				c.nc.Close()
			}
			return nil, fmt.Errorf("cannot open a NATS connection for reads: %w", err)
		}
		out = append(out, &readConn{nc: nc})
	}
	return out, nil
}

// QueryLog returns the log of stream, which must exist, for the reads
// callers ask for: its reads (Range, Get, Last, LastSeq) go through the
// read connections, the least busy first; Append and Follow are as on
// Log's. Safe for concurrent use.
func (c *Conn) QueryLog(ctx context.Context, stream string) (*Log, error) {
	l, err := c.Log(ctx, stream)
	if err != nil {
		return nil, err
	}
	if len(c.reads) > 0 {
		l.readers = c.reads
	}
	return l, nil
}

// reader returns the connection a read of l goes through and the function
// that ends the read.
func (l *Log) reader() (*nats.Conn, func()) {
	if len(l.readers) == 0 {
		return l.nc, func() {}
	}
	rc, done := takeRead(l.readers)
	return rc.nc, done
}

// streamLastSeq asks the server for stream's last sequence over nc, waiting
// at most try.
func streamLastSeq(ctx context.Context, nc *nats.Conn, stream string, try time.Duration) (uint64, error) {
	reply, err := request(ctx, nc, &nats.Msg{Subject: "$JS.API.STREAM.INFO." + stream}, try)
	if err != nil {
		return 0, err
	}
	var info struct {
		State *struct {
			LastSeq uint64 `json:"last_seq"`
		} `json:"state"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &info); err != nil {
		return 0, err
	}
	if info.Error != nil {
		return 0, info.Error
	}
	if info.State == nil {
		return 0, fmt.Errorf("stream %s: an answer without its state", stream)
	}
	return info.State.LastSeq, nil
}
