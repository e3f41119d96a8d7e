package natsjs

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/natsext"
)

// Direct gets are read here rather than by nats.go or jetstreamext: the
// server appends its headers (Nats-Sequence, Nats-Subject, …) after the
// stored message's own, and a message published straight to NATS may carry
// headers of those names. Both libraries read the first value, so such a
// message could pass for another sequence or subject, end a batch early,
// or make every page holding it unreadable. Here the server's value, the
// last, is the one read, and a status answer is one without a sequence.

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

// readDirect reads one answer to a direct get: a stored message (ok), or a
// status (ok false): 404 no message, 204 the end of a batch; any other
// status is an error.
func readDirect(m *nats.Msg) (msg *bus.Message, status string, err error) {
	seqs := m.Header.Values(jetstream.SequenceHeader)
	if len(seqs) == 0 {
		status = lastHeader(m.Header, "Status")
		switch status {
		case "404", "204":
			return nil, status, nil
		case "":
			return nil, "", fmt.Errorf("%w: direct get answer without a sequence", jetstream.ErrInvalidJSAck)
		}
		return nil, status, fmt.Errorf("direct get: %s %s", status, lastHeader(m.Header, "Description"))
	}
	seq, err := strconv.ParseUint(seqs[len(seqs)-1], 10, 64)
	subj := lastHeader(m.Header, jetstream.SubjectHeader)
	if err != nil || subj == "" {
		return nil, "", fmt.Errorf("%w: direct get answer with a bad sequence or subject", jetstream.ErrInvalidJSAck)
	}
	t, _ := time.Parse(time.RFC3339Nano, lastHeader(m.Header, jetstream.TimeStampHeaer))
	return &bus.Message{Subject: subj, Header: bus.Header(m.Header), Data: m.Data, Seq: seq, Time: t}, "", nil
}

// directRequest is the body of a direct get (nats-server's
// JSApiMsgGetRequest).
type directRequest struct {
	Seq      uint64 `json:"seq,omitempty"`
	NextFor  string `json:"next_by_subj,omitempty"`
	Batch    int    `json:"batch,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// directGet reads the message at seq of stream, or jetstream.ErrMsgNotFound.
func directGet(ctx context.Context, nc *nats.Conn, stream string, seq uint64) (*bus.Message, error) {
	req, _ := json.Marshal(directRequest{Seq: seq})
	resp, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	m, status, err := readDirect(resp)
	switch {
	case err != nil:
		return nil, err
	case status != "":
		return nil, jetstream.ErrMsgNotFound
	}
	return m, nil
}

// rangeMaxBytes caps the bytes of one batch; 0 leaves the server's limit.
var rangeMaxBytes = 0

// directBatch reads at most max messages of stream matching filter from
// sequence from, in one batched direct get. pending says the server had
// more matches after the batch's last message.
func directBatch(ctx context.Context, nc *nats.Conn, stream, filter string, from uint64, max int) (out []*bus.Message, pending bool, err error) {
	req, _ := json.Marshal(directRequest{Seq: from, NextFor: filter, Batch: max, MaxBytes: rangeMaxBytes})
	var end string
	eob := func(m *nats.Msg) bool {
		if len(m.Header.Values(jetstream.SequenceHeader)) > 0 {
			return false
		}
		end = lastHeader(m.Header, "Status")
		return end == "204"
	}
	it, err := natsext.RequestMany(ctx, nc, "$JS.API.DIRECT.GET."+stream, req, natsext.RequestManySentinel(eob))
	if err != nil {
		return nil, false, err
	}
	out = make([]*bus.Message, 0, max)
	for resp, err := range it {
		if err != nil {
			return nil, false, err
		}
		m, status, err := readDirect(resp)
		if err != nil {
			return nil, false, err
		}
		if status == "404" { // nothing from here on
			return out, false, nil
		}
		out = append(out, m)
		np, _ := strconv.ParseUint(lastHeader(resp.Header, headerNumPending), 10, 64)
		pending = np > 0
	}
	// The batch ends at the deadline without an error, like a short batch:
	// an expired deadline must be an error, never a short page.
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if end != "204" && len(out) < max {
		return nil, false, fmt.Errorf("direct get batch of %s: %w", stream, nats.ErrTimeout) // ended without its end
	}
	return out, pending && len(out) > 0, nil
}
