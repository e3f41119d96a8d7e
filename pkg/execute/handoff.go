package execute

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/envelope"
)

// Handoff passes the commands this process queues to its own processor in
// memory: the decoded envelope and its catalogue entry, and the knowledge
// that the command is new (its receipt was absent before it was stored, and
// the store took it as new, not as a duplicate). The first delivery of such
// a command is processed without decoding and validating it again or
// reading its receipt. Anything else (a redelivery, a command another
// process queued, one published straight to NATS, an entry already
// evicted) takes the full path: the handoff only ever saves work.
//
// Entries live in two generations (recent), bounded by count and bytes,
// so the entries of commands another replica processes cannot pile up.
type Handoff struct {
	mu      sync.Mutex
	entries recent[*Handed] // by correlation id, sized by the bytes held
}

// Handed is one queued command. It is offered before the store answers
// (the processor may see the message first) and settled after: seq is set,
// or left 0 when the store failed or found a duplicate, then done closes.
type Handed struct {
	corr  string
	raw   []byte // the bytes stored
	env   *envelope.Envelope
	entry *catalog.Entry
	seq   uint64 // in the command log; written before done closes
	done  chan struct{}
	at    time.Time // offered
}

// Bounds of one generation, and how long a delivery that arrives before
// the store's answer waits for it before taking the full path.
const (
	maxHandoff      = 8192
	maxHandoffBytes = 16 << 20
	handoffWait     = 250 * time.Millisecond
)

// NewHandoff returns an empty handoff.
func NewHandoff() *Handoff {
	return &Handoff{entries: newRecent[*Handed](maxHandoff, maxHandoffBytes)}
}

// Len counts the entries held (0 for a nil Handoff).
func (h *Handoff) Len() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.entries.len()
}

// Offer records a command about to be stored; the caller settles it. A
// nil Handoff offers nothing (and returns nil).
func (h *Handoff) Offer(corr string, raw []byte, env *envelope.Envelope, entry *catalog.Entry) *Handed {
	if h == nil {
		return nil
	}
	e := &Handed{corr: corr, raw: raw, env: env, entry: entry, done: make(chan struct{}), at: time.Now()}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries.put(corr, e, len(raw)) // replacing the same command submitted twice at once
	return e
}

// Settle says where the offered command was stored (seq 0: it was not, or
// not as a new message). Safe on a nil entry.
func (h *Handoff) Settle(e *Handed, seq uint64) {
	if e == nil {
		return
	}
	e.seq = seq
	close(e.done)
	if seq == 0 {
		h.mu.Lock()
		h.entries.remove(e.corr, func(got *Handed) bool { return got == e })
		h.mu.Unlock()
	}
}

// takeFirst returns and forgets the entry of corr when it describes
// exactly the stored message seq with bytes raw, delivered for the first
// time. A delivery that came before the store's answer waits for it, for
// handoffWait at most.
func (h *Handoff) takeFirst(ctx context.Context, first bool, corr string, seq uint64, raw []byte) (*Handed, bool) {
	if h == nil || !first || corr == "" {
		return nil, false
	}
	h.mu.Lock()
	e, ok := h.entries.remove(corr, nil)
	h.mu.Unlock()
	if !ok {
		return nil, false
	}
	select {
	case <-e.done:
	default:
		t := time.NewTimer(handoffWait)
		defer t.Stop()
		select {
		case <-e.done:
		case <-t.C:
			return nil, false
		case <-ctx.Done():
			return nil, false
		}
	}
	if e.seq != seq || !bytes.Equal(e.raw, raw) {
		return nil, false
	}
	return e, true
}
