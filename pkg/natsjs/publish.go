package natsjs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publish stores m in stream through a core request (waiting at most
// try), as jetstream's PublishMsg with WithExpectStream does (stream "":
// any stream, as for a key-value put), and returns its sequence and
// whether the stream took it as a duplicate. The usual answer is read by
// hand (readPubAck); any other answer — an error, a domain, anything
// unexpected — goes through encoding/json into the same types nats.go
// uses, so errors keep their *jetstream.APIError codes. This is the hot
// path of every command and every event (docs/decisions.md, "The hottest
// NATS calls skip nats.go's JetStream and key-value layers").
func publish(ctx context.Context, nc *nats.Conn, stream string, m *nats.Msg, try time.Duration) (uint64, bool, error) {
	if stream != "" {
		m.Header.Set(jetstream.ExpectedStreamHeader, stream)
	}
	resp, err := request(ctx, nc, m, try)
	if err != nil { // nats.ErrNoResponders when no stream takes the subject
		return 0, false, err
	}
	if seq, dup, ok := readPubAck(resp.Data, stream); ok {
		return seq, dup, nil
	}
	var ack struct {
		Stream    string              `json:"stream"`
		Seq       uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
		Error     *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	if ack.Error != nil {
		return 0, false, fmt.Errorf("nats: %w", ack.Error)
	}
	if ack.Stream == "" {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	return ack.Seq, ack.Duplicate, nil
}

// readPubAck reads exactly {"stream":"<stream>","seq":N} or the same with
// ,"duplicate": true — what nats-server answers a stored publish — and
// reports false for anything else. stream "" takes any plain stream name.
func readPubAck(b []byte, stream string) (seq uint64, dup, ok bool) {
	cut := func(prefix string) bool {
		if !bytes.HasPrefix(b, []byte(prefix)) {
			return false
		}
		b = b[len(prefix):]
		return true
	}
	if !cut(`{"stream":"`) {
		return 0, false, false
	}
	if stream == "" {
		// Any name up to its closing quote, if it has no escapes.
		end := bytes.IndexByte(b, '"')
		if end <= 0 || bytes.IndexByte(b[:end], '\\') >= 0 {
			return 0, false, false
		}
		b = b[end:]
	} else if !cut(stream) {
		return 0, false, false
	}
	if !cut(`","seq":`) {
		return 0, false, false
	}
	n := 0
	for ; n < len(b) && b[n] >= '0' && b[n] <= '9'; n++ {
		if n == 19 {
			return 0, false, false // longer than this parser vouches for
		}
		seq = seq*10 + uint64(b[n]-'0')
	}
	if n == 0 || (n > 1 && b[0] == '0') {
		return 0, false, false
	}
	b = b[n:]
	switch string(b) {
	case "}":
		return seq, false, true
	case `,"duplicate": true}`, `,"duplicate":true}`: // nats-server writes the first
		return seq, true, true
	}
	return 0, false, false
}
