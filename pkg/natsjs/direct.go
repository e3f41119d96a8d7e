package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Batched direct gets (Range) are read here rather than by jetstreamext:
// the server appends its headers (Nats-Sequence, Nats-Subject, …) after the
// stored message's own, and a message published straight to NATS may carry
// headers of those names — or a header block with a blank line in it,
// after which nats.go stops reading, so the server's headers vanish. The
// libraries read the first value; here the server's value, the last, is
// read, and every message must add up (its stream, a sequence above the one
// before, the previous sequence the server says it sent, a time). The first
// one that does not ends the batch as suspect, and Range reads it through
// the stream leader's JSON API instead, where nothing stored can pass for
// the server's fields (leaderGet). Get reads one message by direct get,
// checked the same way, and asks the leader when it does not add up; Last
// always asks the leader.

// headerNumPending, on each message of a batch, counts the matches after
// it that the server had when the batch began.
const headerNumPending = "Nats-Num-Pending"

// lastHeader returns the last value of key in h, or "": on a direct get's
// answer, the one the server added.
func lastHeader(h nats.Header, key string) string {
	if v := h.Values(key); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// readDirect reads one answer to a direct get of stream: a stored message,
// or a status (a message nil): 404 no message, 204 the end of a batch; any
// other status is an error. ok is false for a message whose server headers
// do not add up (see above).
func readDirect(m *nats.Msg, stream string) (msg *bus.Message, status string, ok bool, err error) {
	seqs := m.Header.Values(jetstream.SequenceHeader)
	if len(seqs) == 0 {
		status = lastHeader(m.Header, "Status")
		switch status {
		case "404", "204":
			return nil, status, true, nil
		case "":
			return nil, "", false, nil
		}
		return nil, status, false, fmt.Errorf("direct get: %s %s", status, lastHeader(m.Header, "Description"))
	}
	seq, err := strconv.ParseUint(seqs[len(seqs)-1], 10, 64)
	subj := lastHeader(m.Header, jetstream.SubjectHeader)
	t, terr := time.Parse(time.RFC3339Nano, lastHeader(m.Header, jetstream.TimeStampHeaer))
	if err != nil || terr != nil || subj == "" || lastHeader(m.Header, jetstream.StreamHeader) != stream {
		return nil, "", false, nil
	}
	return &bus.Message{Subject: subj, Header: bus.Header(m.Header), Data: m.Data, Seq: seq, Time: t}, "", true, nil
}

// directRequest is the body of a direct or leader get (nats-server's
// JSApiMsgGetRequest).
type directRequest struct {
	Seq      uint64 `json:"seq,omitempty"`
	NextFor  string `json:"next_by_subj,omitempty"`
	LastFor  string `json:"last_by_subj,omitempty"`
	Batch    int    `json:"batch,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// maxDirectBatch bounds the messages one batched direct get asks for; a
// longer read takes several (Range goes on while matches are pending). The
// answers queue on a synchronous subscription (directInbox) whose buffer
// the connection sizes to hold a whole batch (syncQueueLen).
const maxDirectBatch = 1024

// syncQueueLen is the buffer of a synchronous subscription: a batched
// direct get's answers (maxDirectBatch messages and the end of batch) with
// room to spare, read while they arrive.
const syncQueueLen = 2 * maxDirectBatch

// directBatch reads at most max messages of stream matching filter from
// sequence from, in one batched direct get of at most maxBytes (0: the
// server's limit). pending says the server had
// more matches after the batch's last message; suspect says the batch
// stopped early at an answer that does not add up (see above), which the
// caller reads another way. ctx bounds the wait for the answers (withRetry
// gives each try its deadline); one that ends first is an error, never a
// short page.
func directBatch(ctx context.Context, nc *nats.Conn, inboxes *directInboxes, stream, filter string, from uint64, max, maxBytes int) (out []*bus.Message, pending, suspect bool, err error) {
	max = min(max, maxDirectBatch)
	req, _ := json.Marshal(directRequest{Seq: from, NextFor: filter, Batch: max, MaxBytes: maxBytes})
	in, err := inboxes.take(nc)
	if err != nil {
		return nil, false, false, err
	}
	// finished: every answer to the request was read (its end of batch,
	// or the 404 the server sends alone), so the inbox is kept.
	finished := false
	defer func() { inboxes.give(nc, in, finished) }()
	if err := in.send(nc, "$JS.API.DIRECT.GET."+stream, req); err != nil {
		return nil, false, false, err
	}
	out = make([]*bus.Message, 0, min(max, 64))
	var last uint64 // the sequence of the batch's previous message, as the server counts it
	for {
		resp, err := in.next(ctx)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			// nats.go's reading of a payload-less answer whose first
			// Status header says 503 — which a stored message can carry
			// too, and which may answer an earlier request on the inbox
			// (nats.go reads it before its subject can be checked). The
			// leader's answer tells them apart.
			return out, false, true, nil
		case err != nil: // ctx's end among them
			return nil, false, false, err
		}
		if len(resp.Header.Values(jetstream.SequenceHeader)) == 0 && lastHeader(resp.Header, "Status") == "204" {
			if lastHeader(resp.Header, "Nats-Last-Sequence") != strconv.FormatUint(last, 10) {
				return unconfirmed(out), false, true, nil // an end that is not the server's: the server's may follow
			}
			finished = true
			return out, pending, false, nil
		}
		m, status, ok, err := readDirect(resp, stream)
		switch {
		case err != nil:
			return nil, false, false, err
		case status == "404" && len(out) == 0: // nothing from here on
			finished = true
			return out, false, false, nil
		case !ok || status != "" || !headersWhole(resp):
			return out, false, true, nil
		case lastHeader(resp.Header, "Nats-Last-Sequence") != strconv.FormatUint(last, 10):
			// The server's chain breaks here: the previous message's
			// sequence was not what the server sent either.
			return unconfirmed(out), false, true, nil
		case m.Seq < from || m.Seq <= last || !server.SubjectMatchesFilter(m.Subject, filter):
			return out, false, true, nil
		}
		out = append(out, m)
		last = m.Seq
		np, _ := strconv.ParseUint(lastHeader(resp.Header, headerNumPending), 10, 64)
		pending = np > 0
	}
}

// unconfirmed drops a batch's last message, which the answer after it did
// not confirm.
func unconfirmed(out []*bus.Message) []*bus.Message {
	if len(out) == 0 {
		return out
	}
	return out[:len(out)-1]
}

// maxHeaderValues bounds the header values of a message read in a batch;
// past it the message is read through the leader.
const maxHeaderValues = 64

// headersWhole reports whether nats.go read m's whole header block: the
// block's size on the wire is no more than the headers it parsed, written
// out, give (a little more for spacing). A blank line inside the block
// ends nats.go's reading early, hiding the server's headers after it.
func headersWhole(m *nats.Msg) bool {
	raw := m.Size() - len(m.Subject) - len(m.Reply) - len(m.Data)
	parsed, values := len("NATS/1.0\r\n\r\n"), 0
	for k, vs := range m.Header {
		for _, v := range vs {
			parsed += len(k) + len(": \r\n") + len(v)
			values++
		}
	}
	return values <= maxHeaderValues && raw <= parsed+headerSlack
}

// headerSlack is the spacing a header block may have beyond "Key: value"
// lines (a writer's extra blanks); more than that is read as a block
// nats.go did not read whole.
const headerSlack = 32

// directInbox is a synchronous subscription that batched direct gets are
// answered on, one request at a time, kept for many. Only an inbox whose
// request was answered in full, with nothing left queued, is kept
// (directInboxes.give); each request's answers still come to a reply
// subject of its own under the inbox, so that an answer of an earlier
// request could never be read as the current one's.
type directInbox struct {
	sub           *nats.Subscription
	prefix, reply string
	n             uint64
}

// send sends data to subject as a new request, its reply subject the
// inbox's next.
func (in *directInbox) send(nc *nats.Conn, subject string, data []byte) error {
	in.n++
	in.reply = in.prefix + strconv.FormatUint(in.n, 10)
	return nc.PublishMsg(&nats.Msg{Subject: subject, Reply: in.reply, Data: data})
}

// next returns the next answer to the request sent last, skipping the
// answers to earlier ones, or ctx's error. A 503 status without payload
// is nats.ErrNoResponders, whichever request it answers.
func (in *directInbox) next(ctx context.Context) (*nats.Msg, error) {
	for {
		m, err := in.sub.NextMsgWithContext(ctx)
		if err != nil || m.Subject == in.reply {
			return m, err
		}
	}
}

// maxIdleInboxes bounds the idle inboxes kept for one connection: the
// reads that run at once on it (its followers, and the callers' reads on
// a read connection) seldom pass it.
const maxIdleInboxes = 16

// directInboxes keeps the idle inboxes of the connections a Log reads
// through, so that a batched read subscribes nothing: a subscription of
// its own cost each read a buffer of syncQueueLen message pointers and
// the server a subscribe and an unsubscribe, at a read or more per
// command stored. Safe for concurrent use.
type directInboxes struct {
	mu   sync.Mutex
	idle map[*nats.Conn][]*directInbox
}

func newDirectInboxes() *directInboxes {
	return &directInboxes{idle: map[*nats.Conn][]*directInbox{}}
}

// take returns an idle inbox of nc, or a new one.
func (d *directInboxes) take(nc *nats.Conn) (*directInbox, error) {
	d.mu.Lock()
	if idle := d.idle[nc]; len(idle) > 0 {
		in := idle[len(idle)-1]
		d.idle[nc] = idle[:len(idle)-1]
		d.mu.Unlock()
		return in, nil
	}
	d.mu.Unlock()
	prefix := nc.NewInbox() + "."
	sub, err := nc.SubscribeSync(prefix + "*")
	if err != nil {
		return nil, err
	}
	return &directInbox{sub: sub, prefix: prefix}, nil
}

// give returns in, taken from nc. It is kept when finished (every answer
// to its last request was read), nothing is queued on it and it is still
// subscribed, unless enough are idle; otherwise it is unsubscribed, so
// that the answers of a read given up on (its deadline passed, a batch
// that stopped early) neither fill an idle inbox's buffer nor hold its
// memory, nor hold up the connection's drain.
func (d *directInboxes) give(nc *nats.Conn, in *directInbox, finished bool) {
	if queued, _, err := in.sub.Pending(); finished && err == nil && queued == 0 {
		d.mu.Lock()
		if idle := d.idle[nc]; len(idle) < maxIdleInboxes {
			d.idle[nc] = append(idle, in)
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
	}
	_ = in.sub.Unsubscribe()
}
