package app

import (
	"bytes"
	"context"
	"sync"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/envelope"
)

// handoff passes the commands this process queues to its own processor in
// memory: the decoded envelope and its catalogue entry, and the knowledge
// that the command is new (its receipt was absent before it was stored, and
// the store took it as new, not as a duplicate). The first delivery of such
// a command is processed without decoding and validating it again or
// reading its receipt. Anything else (a redelivery, a command another
// process queued, one published straight to NATS, an entry the bound
// dropped) takes the full path: the handoff only ever saves work.
type handoff struct {
	mu sync.Mutex
	m  map[string]*handed // by correlation id
}

// handed is one queued command. It is offered before the store answers
// (the processor may see the message first) and settled after: seq is set,
// or left 0 when the store failed or found a duplicate, then done closes.
type handed struct {
	raw   []byte // the bytes stored
	env   *envelope.Envelope
	entry *catalog.Entry
	seq   uint64 // in the command log; written before done closes
	done  chan struct{}
}

// maxHandoff bounds the entries waiting; past it the map starts over
// (entries of commands another replica processes are never taken).
const maxHandoff = 16384

// EnableHandoff makes the commands this App queues reach its own processor
// in memory (see handoff). Call it before serving when this process runs
// the processor.
func (a *App) EnableHandoff() { a.handoff = &handoff{} }

// offer records a command about to be stored; the caller settles it.
func (h *handoff) offer(corr string, raw []byte, env *envelope.Envelope, entry *catalog.Entry) *handed {
	if h == nil {
		return nil
	}
	e := &handed{raw: raw, env: env, entry: entry, done: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHandoff {
		h.m = make(map[string]*handed, 1024)
	}
	h.m[corr] = e
	return e
}

// settle says where the offered command was stored (seq 0: it was not, or
// not as a new message).
func (h *handoff) settle(corr string, e *handed, seq uint64) {
	if e == nil {
		return
	}
	e.seq = seq
	close(e.done)
	if seq == 0 {
		h.mu.Lock()
		if h.m[corr] == e {
			delete(h.m, corr)
		}
		h.mu.Unlock()
	}
}

// takeFirst returns and forgets the entry of corr when it describes
// exactly the stored message seq with bytes raw, delivered for the first
// time. It waits for the store's answer when the delivery came first.
func (h *handoff) takeFirst(ctx context.Context, first bool, corr string, seq uint64, raw []byte) (*handed, bool) {
	if h == nil || !first || corr == "" {
		return nil, false
	}
	h.mu.Lock()
	e, ok := h.m[corr]
	if ok {
		delete(h.m, corr)
	}
	h.mu.Unlock()
	if !ok {
		return nil, false
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return nil, false
	}
	if e.seq != seq || !bytes.Equal(e.raw, raw) {
		return nil, false
	}
	return e, true
}
