package projection

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
)

// EventCopies keeps a copy of every message of the event log on the
// replica's disk, under its sequence, in a store of their own (its keys
// come in the log's order), so that a read of an old event (a
// correlation lookup, a page through the type index, a trace) costs a
// read of the replica's disk rather than one of the NATS server's: the
// server answers a read by sequence by loading the whole file block that
// holds it (8 MB for the event log) and keeping it for a while
// (docs/decisions.md, "Copies of the events on the replica's disk"). It
// follows the log from what the disk holds, as the type index does, and
// nothing waits for it: a read past what it holds goes to the log (Log).
// Safe for concurrent use.
type EventCopies struct {
	model *diskModel
}

// NewEventCopies returns the copies of the event log on disk, empty until
// Start.
func NewEventCopies(disk bus.Disk, log *slog.Logger) *EventCopies {
	return &EventCopies{model: newDiskModel(disk, "event copies", log)}
}

// ForgetOtherEventCopies empties disk, the copies' store, when its copies
// hold more of the event log than the log's last sequence, events:
// another log's, or kept across a restore. They are then made again from
// the log.
func ForgetOtherEventCopies(disk ResettableDisk, events uint64, log *slog.Logger) error {
	held, err := NewEventCopies(disk, log).Progress()
	if err != nil || held <= events {
		return err
	}
	log.Warn("the copies of the events on disk hold more of the event log than it has (another log's, or a restore's): making them again from the log",
		"held", held, "events", events)
	return disk.Reset()
}

// Progress returns the sequence of the event log the copies hold on disk,
// as they were left, before Start.
func (c *EventCopies) Progress() (uint64, error) { return c.model.load() }

// Start follows the event log from tail after what the disk holds, until
// ctx ends, and returns at once unless the disk's progress cannot be
// read.
func (c *EventCopies) Start(ctx context.Context, tail bus.Tail) error {
	return c.model.follow(ctx, tail, nil, func(ev *bus.Event) {
		c.model.put(ctx, ev.Seq, bus.DiskWrite{Key: copyKey(ev.Seq), Val: AppendEventCopy(nil, ev.Message)})
	})
}

// Through returns the sequence up to which the disk holds the copies.
func (c *EventCopies) Through() uint64 { return c.model.through.Load() }

// WaitThrough waits until the disk holds the copies up to seq, or ctx
// ends.
func (c *EventCopies) WaitThrough(ctx context.Context, seq uint64) error {
	return c.model.waitThrough(ctx, seq)
}

// Get returns the copy of the event at seq, and false when the copies
// hold none: seq is past what they were handed, or a copy is unreadable
// (logged).
func (c *EventCopies) Get(seq uint64) (*bus.Message, bool, error) {
	if seq == 0 || seq > c.model.applied.Load() {
		return nil, false, nil
	}
	raw, ok, err := c.model.get(copyKey(seq))
	if err != nil || !ok {
		return nil, false, err
	}
	m, err := ReadEventCopy(raw, seq)
	if err != nil {
		c.model.log.Warn("a copy of an event on the replica's disk is unreadable: read from the log", "seq", seq, "err", err.Error())
		return nil, false, nil
	}
	return m, true, nil
}

// scan returns the copies the disk holds from sequence from up to
// through, in order, at most max of them, stopping as bus.Range does at
// bus.RangeBytes of payload.
func (c *EventCopies) scan(from, through uint64, max int) ([]*bus.Message, error) {
	var out []*bus.Message
	size := 0
	var bad error
	err := c.model.disk.Scan(copyKey(from), copyKey(through+1), func(key, val []byte) bool {
		seq := binary.BigEndian.Uint64(key[2:])
		m, err := ReadEventCopy(val, seq)
		if err != nil {
			bad = fmt.Errorf("the copy of event %d: %w", seq, err)
			return false
		}
		out, size = append(out, m), size+len(m.Data)
		return len(out) < max && size < bus.RangeBytes
	})
	if err == nil && bad != nil {
		err = bad
	}
	return out, err
}

// Log returns events, the event log, reading Get and whole-log Range
// (filter ">") from the copies where they hold what is asked, and
// everything else from events.
func (c *EventCopies) Log(events bus.Log) bus.Log { return &copiedLog{Log: events, copies: c} }

// copiedLog is an event log whose reads by sequence come from its copies
// on the replica's disk where they can.
type copiedLog struct {
	bus.Log
	copies *EventCopies
}

// Get reads the event at seq from the copies, and from the log when they
// do not hold it or cannot be read.
func (l *copiedLog) Get(ctx context.Context, seq uint64) (*bus.Message, error) {
	m, ok, err := l.copies.Get(seq)
	if err != nil {
		l.unread(err, seq)
	}
	if ok {
		return m, nil
	}
	return l.Log.Get(ctx, seq)
}

// unread logs that the copies could not be read from sequence seq on, and
// that the log is read instead (a store closed as the replica stops is
// not worth a line).
func (l *copiedLog) unread(err error, seq uint64) {
	if !errors.Is(err, bus.ErrDiskClosed) {
		l.copies.model.log.Warn("reading copies of events on the replica's disk failed: read from the log", "from", seq, "err", err.Error())
	}
}

// Range reads a whole-log range from the copies up to what the disk
// holds, and the rest, if the range goes on past it, from the log.
func (l *copiedLog) Range(ctx context.Context, filter string, from uint64, max int) ([]*bus.Message, error) {
	through := l.copies.Through()
	if filter != ">" || from == 0 || from > through || max <= 0 {
		return l.Log.Range(ctx, filter, from, max)
	}
	ms, err := l.copies.scan(from, through, max)
	if err != nil {
		l.unread(err, from)
		return l.Log.Range(ctx, filter, from, max)
	}
	if bus.Full(ms, max) {
		return ms, nil
	}
	rest, err := l.Log.Range(ctx, filter, through+1, max-len(ms))
	if err != nil {
		return nil, err
	}
	return append(ms, rest...), nil
}

func copyKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{keyCopy, 0}, seq)
}

// A copy of an event on disk holds the message as the log stored it, all
// but its sequence (its key's), in order:
//
//	version   1 byte, eventCopyCodec
//	time      varint Unix nanoseconds (0: none)
//	subject   string
//	headers   uvarint count of keys, then each key as a string and its
//	          values as a uvarint count and strings
//	data      the rest
//
// where a string is a uvarint length and its bytes.
const eventCopyCodec = 1

// readHeaders are the headers a read of the log adds to a message (a
// direct get's, JetStream's), which are not stored with it: a copy
// leaves them out (its subject, sequence and time are kept apart).
var readHeaders = map[string]bool{"Nats-Stream": true, "Nats-Sequence": true, "Nats-Subject": true, "Nats-Time-Stamp": true,
	"Nats-Num-Pending": true, "Nats-Last-Sequence": true, "Nats-UpTo-Sequence": true}

// ReadHeader reports whether key is a header a read of the log adds,
// which a copy leaves out.
func ReadHeader(key string) bool { return readHeaders[key] }

// AppendEventCopy appends m's encoding as a copy on disk to b.
func AppendEventCopy(b []byte, m *bus.Message) []byte {
	b = append(b, eventCopyCodec)
	var nanos int64
	if !m.Time.IsZero() {
		nanos = m.Time.UnixNano()
	}
	b = binary.AppendVarint(b, nanos)
	b = appendString(b, m.Subject)
	n := 0
	for k := range m.Header {
		if !readHeaders[k] {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range m.Header {
		if readHeaders[k] {
			continue
		}
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return append(b, m.Data...)
}

// errEventCopyCodec says a value is not a copy AppendEventCopy wrote.
var errEventCopyCodec = errors.New("not a copy of an event")

// ReadEventCopy decodes a copy AppendEventCopy wrote of the message at seq.
// A value cut short or of another version is errEventCopyCodec.
func ReadEventCopy(raw []byte, seq uint64) (*bus.Message, error) {
	d := partDecoder{raw: raw}
	if v := d.byte(); v != eventCopyCodec {
		return nil, fmt.Errorf("%w: version %d", errEventCopyCodec, v)
	}
	m := &bus.Message{Seq: seq}
	if nanos := d.varint(); nanos != 0 {
		m.Time = time.Unix(0, nanos).UTC()
	}
	m.Subject = d.string()
	n := d.uvarint()
	if n > uint64(len(d.raw)) { // each key takes two bytes at least
		d.bad, n = true, 0
	}
	m.Header = make(bus.Header, n)
	for range n {
		k := d.string()
		vn := d.uvarint()
		if vn > uint64(len(d.raw)) {
			d.bad = true
			break
		}
		vs := make([]string, vn)
		for i := range vs {
			vs[i] = d.string()
		}
		m.Header[k] = vs
	}
	if d.bad {
		return nil, errEventCopyCodec
	}
	m.Data = append([]byte(nil), d.raw...)
	return m, nil
}
