package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KV implements bus.KV on a JetStream key-value bucket.
type KV struct {
	kv jetstream.KeyValue
	// The hot operations of a plain bucket — not a mirror, no sources —
	// skip nats.go's key-value layer: one request each, built and read
	// here (see lastEntry and publish): Update on any plain bucket, Get and
	// Create when it also allows direct gets. Anything they do not vouch
	// for goes through kv.
	nc          *nats.Conn
	stream, pre string // KV_<bucket>, $KV.<bucket>.
	plain       bool
	direct      bool // the bucket allows direct gets
	// async sends PutAsync's puts (made at the first): a JetStream
	// context of its own, so that its bounds — asyncMaxPending puts in
	// flight, each answered within opTimeout — are this bucket's.
	asyncOnce sync.Once
	async     jetstream.JetStream
	asyncErr  error
}

var _ bus.AsyncKV = (*KV)(nil)

// KVStream is the name of the stream that holds a key-value bucket.
func KVStream(bucket string) string { return "KV_" + bucket }

// KV returns the bucket, which must exist.
func (c *Conn) KV(ctx context.Context, bucket string) (*KV, error) {
	// A cluster still settling may drop a lookup: each is asked again
	// (withRetry, within its budget) rather than waited on for all of ctx.
	var kv jetstream.KeyValue
	err := withRetry(ctx, func(ctx context.Context) (err error) {
		kv, err = c.JS.KeyValue(ctx, bucket)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", bucket, err)
	}
	k := &KV{kv: kv, nc: c.NC, stream: KVStream(bucket), pre: "$KV." + bucket + "."}
	var st jetstream.Stream
	err = withRetry(ctx, func(ctx context.Context) (err error) {
		st, err = c.JS.Stream(ctx, k.stream)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", bucket, err)
	}
	cfg := st.CachedInfo().Config
	k.plain = cfg.Mirror == nil && len(cfg.Sources) == 0
	k.direct = k.plain && cfg.AllowDirect
	return k, nil
}

// Get implements bus.KV. A read is retried: a request lost in a failover
// must not wait out the caller's whole deadline.
func (k *KV) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	if k.direct && plainKey(key) {
		var val []byte
		var rev uint64
		err := storeRetry.run(ctx, func(try time.Duration) (err error) {
			val, rev, err = k.getLast(ctx, key, try)
			return err
		})
		if err != nil {
			return nil, 0, translate(err)
		}
		return val, rev, nil
	}
	var e jetstream.KeyValueEntry
	err := withRetry(ctx, func(ctx context.Context) (err error) {
		e, err = k.kv.Get(ctx, key)
		return err
	})
	if err != nil {
		return nil, 0, translate(err)
	}
	return e.Value(), e.Revision(), nil
}

// getLast reads key's latest entry with one direct get, as nats.go's Get
// does: a delete or purge marker is "not found".
func (k *KV) getLast(ctx context.Context, key string, try time.Duration) ([]byte, uint64, error) {
	val, rev, marker, err := k.lastEntry(ctx, key, try)
	if err == nil && marker {
		return nil, 0, jetstream.ErrKeyNotFound
	}
	return val, rev, err
}

// lastEntry reads key's latest entry with one direct get: its value and
// revision, or the revision of a delete or purge marker (marker true), or
// jetstream.ErrKeyNotFound when the key has no entry at all, waiting at
// most try for the answer.
func (k *KV) lastEntry(ctx context.Context, key string, try time.Duration) (val []byte, rev uint64, marker bool, err error) {
	resp, err := request(ctx, k.nc, &nats.Msg{Subject: "$JS.API.DIRECT.GET." + k.stream + "." + k.pre + key}, try)
	if err != nil {
		return nil, 0, false, err
	}
	// The bucket is agentbus's own (only its NATS user may write it), yet
	// an answer that does not add up is an error, never a value.
	m, status, ok, err := readDirect(resp, k.stream)
	switch {
	case err != nil:
		return nil, 0, false, fmt.Errorf("kv get %s: %w", key, err)
	case status == "404":
		return nil, 0, false, jetstream.ErrKeyNotFound
	case !ok || status != "":
		return nil, 0, false, fmt.Errorf("kv get %s: an answer that is not a stored entry", key)
	}
	h := nats.Header(m.Header)
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return nil, m.Seq, true, nil
	case "":
		switch h.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge", "Remove":
			return nil, m.Seq, true, nil
		}
	}
	return m.Data, m.Seq, false, nil
}

// put stores val under key if its latest revision is rev (0: no entry),
// within opTimeout: callers' contexts (a consumer's) may have no deadline.
func (k *KV) put(ctx context.Context, key string, val []byte, rev uint64) (uint64, error) {
	m := &nats.Msg{Subject: k.pre + key, Header: nats.Header{}, Data: val}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	var seq uint64
	err := writeOnce.run(ctx, func(try time.Duration) (err error) {
		seq, _, err = publish(ctx, k.nc, "", m, try)
		return err
	})
	return seq, err
}

// Create implements bus.KV.
func (k *KV) Create(ctx context.Context, key string, val []byte) (uint64, error) {
	if !k.direct || !plainKey(key) {
		rev, err := k.kv.Create(ctx, key, val)
		return rev, translate(err)
	}
	rev, err := k.put(ctx, key, val, 0)
	if err = translate(err); !errors.Is(err, errs.ErrConflict) {
		return rev, err
	}
	// The key has a value, or only a delete or purge marker, which a
	// create replaces (as nats.go's Create does), conditional on it.
	var marker bool
	err = storeRetry.run(ctx, func(try time.Duration) (err error) {
		_, rev, marker, err = k.lastEntry(ctx, key, try)
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// Gone again since the create conflicted (or a lagging replica
		// answered): the create still lost a race, so the caller reads
		// and tries again, as after any conflict.
		return 0, errs.ErrConflict
	case err != nil:
		return 0, translate(err)
	case !marker:
		return 0, errs.ErrConflict
	}
	rev, err = k.put(ctx, key, val, rev)
	return rev, translate(err)
}

// Update implements bus.KV.
func (k *KV) Update(ctx context.Context, key string, val []byte, rev uint64) (uint64, error) {
	var r uint64
	var err error
	if k.plain && plainKey(key) {
		r, err = k.put(ctx, key, val, rev)
	} else {
		r, err = k.kv.Update(ctx, key, val, rev)
	}
	if err != nil {
		return 0, translate(err)
	}
	return r, nil
}

// plainKey reports a key nats.go accepts ([-/_=.A-Za-z0-9], no empty
// token); others take nats.go's path, which refuses them.
func plainKey(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, "..") {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '/' || c == '_' || c == '=' || c == '.') {
			return false
		}
	}
	return true
}

// Put implements bus.KV.
func (k *KV) Put(ctx context.Context, key string, val []byte) (uint64, error) {
	r, err := k.kv.Put(ctx, key, val)
	return r, translate(err)
}

// Delete implements bus.KV.
func (k *KV) Delete(ctx context.Context, key string) error {
	return translate(k.kv.Delete(ctx, key))
}

// asyncMaxPending bounds the puts of one bucket in flight at once through
// PutAsync; past it a PutAsync waits up to nats.go's stall wait (200 ms)
// for a free slot, then fails (nothing sent).
const asyncMaxPending = 4096

// PutAsync implements bus.AsyncKV: a JetStream async publish of the key's
// subject, on the same connection as every other write of the bucket (so
// after them, in order), answered through one reply subscription. A key
// or bucket the fast path does not vouch for (see plainKey) is put at
// once, synchronously, and returned already answered.
func (k *KV) PutAsync(key string, val []byte) (bus.PendingPut, error) {
	if !k.plain || !plainKey(key) {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		rev, err := k.Put(ctx, key, val)
		return donePut{rev, err}, nil
	}
	k.asyncOnce.Do(func() {
		k.async, k.asyncErr = jetstream.New(k.nc, jetstream.WithPublishAsyncTimeout(opTimeout),
			jetstream.WithPublishAsyncMaxPending(asyncMaxPending))
	})
	if k.asyncErr != nil {
		return nil, k.asyncErr
	}
	f, err := k.async.PublishMsgAsync(&nats.Msg{Subject: k.pre + key, Data: val})
	if err != nil {
		return nil, asyncErr(err)
	}
	return &pendingPut{f: f}, nil
}

// asyncErr translates an async publish's error: its own timeout is "no
// answer now", like a request's.
func asyncErr(err error) error {
	if errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
		return fmt.Errorf("%w: %v", errs.ErrUnavailable, err)
	}
	return translate(err)
}

// donePut is a put already answered.
type donePut struct {
	rev uint64
	err error
}

func (p donePut) Wait(context.Context) (uint64, error) { return p.rev, p.err }

// pendingPut is a put in flight. nats.go hands its answer over once, on
// one of two channels: the first Wait to get it keeps it for the others
// (mu orders them).
type pendingPut struct {
	f    jetstream.PubAckFuture
	mu   sync.Mutex
	done bool
	rev  uint64
	err  error
}

func (p *pendingPut) Wait(ctx context.Context) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.done {
		select {
		case ack := <-p.f.Ok():
			p.rev = ack.Sequence
		case err := <-p.f.Err():
			p.err = asyncErr(err)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		p.done = true
	}
	return p.rev, p.err
}
