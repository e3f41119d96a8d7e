package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Log implements bus.Log on one stream. Safe for concurrent use.
type Log struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	stream string
	s      jetstream.Stream
	log    *slog.Logger
	// readers, when set, are the connections reads go through (QueryLog);
	// otherwise reads go through nc.
	readers []*readConn
	// inboxes are the idle inboxes of batched reads (directInboxes).
	inboxes *directInboxes
	// batchBytes caps the bytes of one batched read below what is left
	// of bus.RangeBytes (tests set it to get short batches); 0: no lower
	// cap.
	batchBytes int
	// followers are this Log's Follow loops, read without a lock on every
	// append; followMu orders their changes (the slice is copied on
	// change, never changed in place).
	followMu  sync.Mutex
	followers atomic.Pointer[[]follower]
	// word is the stream's RePublish of what it stores, when it has one
	// Follow can use; wordOnce makes its one subscription, at the first
	// Follow. wordHeard says the word brings whole messages: set by one
	// that adds up, cleared when a loop's poll finds messages no word
	// brought. While it is set, an append does not wake the loops of the
	// whole stream: its word will.
	word      *storedWord
	wordOnce  sync.Once
	wordHeard atomic.Bool
}

// storedWord is a stream's RePublish of "<from>>" to "<to>>": the server
// publishes each message it stores again under to, whole or (headersOnly)
// its headers alone.
type storedWord struct {
	from, to    string
	headersOnly bool
}

// follower is a Follow loop: its filter, its wake-up channel and, for a
// loop of the whole stream (filter ">"), the stored messages the word
// brought it, in the order the server stored them, with the bytes of
// their payloads (storedQueue and storedQueueBytes at most; past either
// the loop is woken to read instead).
type follower struct {
	filter      string
	wake        chan struct{}
	stored      chan *bus.Message
	storedBytes *atomic.Int64
}

// storedQueue and storedQueueBytes bound the messages of the word a
// Follow loop of the whole stream has not taken yet.
const (
	storedQueue      = 1024
	storedQueueBytes = 8 << 20
)

var _ bus.Log = (*Log)(nil)

// Log returns the log of stream, which must exist. A cluster still
// settling may drop the stream's lookup: it is asked again (withRetry,
// within its budget) rather than waited on for all of ctx.
func (c *Conn) Log(ctx context.Context, stream string) (*Log, error) {
	var s jetstream.Stream
	err := withRetry(ctx, func(ctx context.Context) (err error) {
		s, err = c.JS.Stream(ctx, stream)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	return &Log{js: c.JS, nc: c.NC, stream: stream, s: s, log: c.log, inboxes: c.inboxes, word: wordOf(s.CachedInfo().Config.RePublish)}, nil
}

// wordOf returns the RePublish Follow can take as word of stored
// messages: a source "<p>.>" republished to "<q>.>". Any other, or none,
// is nil.
func wordOf(rp *jetstream.RePublish) *storedWord {
	if rp == nil || !strings.HasSuffix(rp.Source, ".>") || !strings.HasSuffix(rp.Destination, ".>") {
		return nil
	}
	return &storedWord{from: strings.TrimSuffix(rp.Source, ">"), to: strings.TrimSuffix(rp.Destination, ">"), headersOnly: rp.HeadersOnly}
}

// listenForWord subscribes, once for the Log, to the word of what the
// stream stores: one subscription whatever the followers (heard). A
// failed subscription is logged; the loops then read at every poll.
func (l *Log) listenForWord() {
	if l.word == nil {
		return
	}
	l.wordOnce.Do(func() {
		_, err := l.nc.Subscribe(l.word.to+">", l.heard)
		if err != nil && l.log != nil {
			l.log.Warn("following the log: no word of stored messages; reading every poll", "subject", l.word.to+">", "err", err)
		}
	})
}

// heard takes one word of a stored message: it hands the message to the
// Follow loops of the whole stream when the word carries it whole and it
// adds up (wordMessage), and wakes, to read the log, every other loop
// whose filter takes its subject and one whose queue is full. Never
// blocks.
//
// The word is taken on the server's say-so, as a direct get's answer is:
// a client allowed to publish under the word's subject could pass a
// message off as stored, so no client but agentbus may (deploy/README).
// A client that may not can still have the server send there: a consumer
// delivery to a subject of its choosing (which carries a stored message's
// headers as they are, and an acknowledgement subject) or a direct get's
// answer (whose server headers, last, name the message truly), so a word
// must come without a reply subject and add up.
func (l *Log) heard(m *nats.Msg) {
	subject := l.word.from + strings.TrimPrefix(m.Subject, l.word.to)
	var stored *bus.Message
	if !l.word.headersOnly {
		stored = wordMessage(m, l.stream, subject)
	}
	if stored != nil && !l.wordHeard.Load() {
		l.wordHeard.Store(true)
	}
	fs := l.followers.Load()
	if fs == nil {
		return
	}
	for _, f := range *fs {
		if !server.SubjectMatchesFilter(subject, f.filter) {
			continue
		}
		if stored != nil && f.stored != nil {
			if f.storedBytes.Add(int64(len(stored.Data))) <= storedQueueBytes {
				select {
				case f.stored <- stored:
					continue
				default: // the loop is behind: it reads
				}
			}
			f.storedBytes.Add(-int64(len(stored.Data)))
		}
		select {
		case f.wake <- struct{}{}:
		default: // already due to read
		}
	}
}

// wordMessage reads a word of stream that carries the whole message as
// the message stored at subject, checked as a direct get's answer is
// (readDirect, headersWhole); nil when it has a reply subject (the
// server's RePublish has none), does not add up or carries the headers
// alone (Nats-Msg-Size: a stream changed to headers only), and the loop
// then reads the log instead.
func wordMessage(m *nats.Msg, stream, subject string) *bus.Message {
	if m.Reply != "" || len(m.Header.Values("Nats-Msg-Size")) > 0 || !headersWhole(m) {
		return nil
	}
	sm, status, ok, err := readDirect(m, stream)
	if err != nil || !ok || status != "" || sm == nil || sm.Subject != subject {
		return nil
	}
	return sm
}

// toNats wraps m for publishing. The header map is shared, not copied:
// the messages belong to Append (see bus.Log), and publishing writes
// transport headers into it.
func toNats(m *bus.Message) *nats.Msg {
	h := nats.Header(m.Header)
	if h == nil {
		h = nats.Header{}
	}
	return &nats.Msg{Subject: m.Subject, Header: h, Data: m.Data}
}

// withExpect sets the optimistic-concurrency headers of expect on nm.
func withExpect(nm *nats.Msg, expect *bus.Expect) {
	nm.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect.LastSeq, 10))
	nm.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, expect.Subject)
}

// appendRetry is the policy of an append: a lost attempt is retried only
// when every message carries a message id, so that a retried success is
// recognised as a duplicate; otherwise it is tried once within opTimeout.
func appendRetry(msgs []*bus.Message) retry {
	for _, m := range msgs {
		if m.Header.Get(bus.HeaderMsgID) == "" {
			return writeOnce
		}
	}
	return storeRetry
}

// Append implements bus.Log.
func (l *Log) Append(ctx context.Context, msgs []*bus.Message, expect *bus.Expect) (uint64, error) {
	if len(msgs) == 0 {
		return 0, errors.New("append: no messages")
	}
	policy := appendRetry(msgs)
	if len(msgs) == 1 {
		nm := toNats(msgs[0])
		if expect != nil {
			withExpect(nm, expect)
		}
		var seq uint64
		var dup bool
		err := policy.run(ctx, func(try time.Duration) (err error) {
			seq, dup, err = publish(ctx, l.nc, l.stream, nm, try)
			return err
		})
		if err != nil {
			return 0, translate(err)
		}
		if dup {
			return seq, errs.ErrDuplicate
		}
		l.wakeFollowers(msgs)
		return seq, nil
	}
	batch := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		batch[i] = toNats(m)
	}
	if expect != nil {
		withExpect(batch[0], expect)
	}
	var ack *jetstreamext.BatchAck
	err := policy.do(ctx, func(ctx context.Context) (err error) {
		ack, err = jetstreamext.PublishMsgBatch(ctx, l.js, batch)
		return err
	})
	if err != nil {
		return 0, translate(err)
	}
	l.wakeFollowers(msgs)
	return ack.Sequence, nil
}

// wakeFollowers has this Log's Follow loops whose filter takes one of
// msgs read at once: what this process appends (a registration, say)
// reaches its own registries without waiting for the next poll. A loop
// the word brings whole messages to (wordHeard) is left alone: the word
// brings these too. Never blocks.
func (l *Log) wakeFollowers(msgs []*bus.Message) {
	fs := l.followers.Load()
	if fs == nil {
		return
	}
	heard := l.wordHeard.Load()
	for _, f := range *fs {
		if heard && f.stored != nil {
			continue
		}
		if !slices.ContainsFunc(msgs, func(m *bus.Message) bool { return server.SubjectMatchesFilter(m.Subject, f.filter) }) {
			continue
		}
		select {
		case f.wake <- struct{}{}:
		default: // already due to read
		}
	}
}

// follow registers a Follow loop of filter and returns it with the
// function that removes it.
func (l *Log) follow(filter string) (follower, func()) {
	f := follower{filter: filter, wake: make(chan struct{}, 1)}
	if filter == ">" && l.word != nil && !l.word.headersOnly {
		f.stored, f.storedBytes = make(chan *bus.Message, storedQueue), new(atomic.Int64)
	}
	change := func(edit func([]follower) []follower) {
		l.followMu.Lock()
		defer l.followMu.Unlock()
		var cur []follower
		if fs := l.followers.Load(); fs != nil {
			cur = *fs
		}
		next := edit(slices.Clone(cur))
		l.followers.Store(&next)
	}
	change(func(fs []follower) []follower { return append(fs, f) })
	return f, func() {
		change(func(fs []follower) []follower {
			return slices.DeleteFunc(fs, func(x follower) bool { return x.wake == f.wake })
		})
	}
}

// Last implements bus.Log. It reads through the stream leader, never a
// direct get: on a replicated stream a follower answering a direct get may
// lag, and Last feeds decisions (a stale "does not exist" would become a
// wrong, permanent rejection).
func (l *Log) Last(ctx context.Context, filter string) (*bus.Message, error) {
	m, err := l.leaderGet(ctx, directRequest{LastFor: filter})
	if err != nil && !errors.Is(err, errs.ErrNotFound) {
		return nil, fmt.Errorf("stream %s: last message of %s: %w", l.stream, filter, err)
	}
	return m, err
}

// leaderGet reads one message through the stream leader's JSON API
// ($JS.API.STREAM.MSG.GET): req is {seq}, {seq, next_by_subj} or
// {last_by_subj}. The message's subject, sequence and time come from the
// JSON and its headers from the stored header block alone, so nothing
// stored can pass for them. Retried like every read; errs.ErrNotFound when
// there is no such message.
func (l *Log) leaderGet(ctx context.Context, req directRequest) (*bus.Message, error) {
	body, _ := json.Marshal(req)
	var resp struct {
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	nc, done := l.reader()
	defer done()
	err := storeRetry.run(ctx, func(try time.Duration) error {
		reply, err := request(ctx, nc, &nats.Msg{Subject: "$JS.API.STREAM.MSG.GET." + l.stream, Data: body}, try)
		if err != nil {
			return err
		}
		resp.Message, resp.Error = nil, nil
		if err := json.Unmarshal(reply.Data, &resp); err != nil {
			return err
		}
		if resp.Error != nil {
			return resp.Error // retried while a group elects its leader
		}
		return nil
	})
	if err != nil {
		return nil, translate(err)
	}
	if resp.Message == nil {
		return nil, errs.ErrNotFound
	}
	m := &bus.Message{Subject: resp.Message.Subject, Header: bus.Header{}, Data: resp.Message.Data, Seq: resp.Message.Seq, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		// A header block nats.go cannot read leaves the message without
		// headers rather than unreadable.
		if h, err := nats.DecodeHeadersMsg(resp.Message.Header); err == nil {
			m.Header = bus.Header(h)
		}
	}
	return m, nil
}

// Get implements bus.Log with a direct get, which any replica answers,
// read as a batch's messages are (readDirect); an answer that is not the
// message — none, a replica that has not stored it yet, one that does
// not add up — is followed by a read through the stream leader
// (leaderGet), whose word is final.
func (l *Log) Get(ctx context.Context, seq uint64) (*bus.Message, error) {
	if seq == 0 {
		return nil, errs.ErrNotFound // no message has sequence 0
	}
	if m := l.directGet(ctx, seq); m != nil {
		return m, nil
	}
	m, err := l.leaderGet(ctx, directRequest{Seq: seq})
	if err != nil && !errors.Is(err, errs.ErrNotFound) {
		return nil, fmt.Errorf("stream %s: message %d: %w", l.stream, seq, err)
	}
	return m, err
}

// directGet returns the message at seq from one direct get, or nil when
// the answer is anything else.
func (l *Log) directGet(ctx context.Context, seq uint64) *bus.Message {
	body, _ := json.Marshal(directRequest{Seq: seq})
	nc, done := l.reader()
	defer done()
	resp, err := request(ctx, nc, &nats.Msg{Subject: "$JS.API.DIRECT.GET." + l.stream, Data: body}, directGetTry)
	if err != nil {
		return nil
	}
	m, status, ok, err := readDirect(resp, l.stream)
	if err != nil || !ok || status != "" || !headersWhole(resp) || m.Seq != seq {
		return nil
	}
	return m
}

// directGetTry bounds the wait for a direct get's answer before the
// leader is asked.
const directGetTry = time.Second

// Range implements bus.Log with batched direct gets (see direct.go). A
// batch can end before max with more matches pending (the server's byte
// limit per batch, or a replica's store closing under it as the node goes
// down): Range then goes on from where the batch ended, so a page is not
// short while the answering replica knows of more matches (a follower that
// lags may end it early; the next page goes on). An empty or suspect batch
// is followed by one read through the leader, so an empty page is the
// leader's word. Each request is retried on "no answer now".
func (l *Log) Range(ctx context.Context, filter string, from uint64, max int) ([]*bus.Message, error) {
	return l.read(ctx, filter, from, max, true)
}

// read is Range; confirmEmpty false skips asking the leader about an empty
// batch (a poller asks again soon anyway).
func (l *Log) read(ctx context.Context, filter string, from uint64, max int, confirmEmpty bool) ([]*bus.Message, error) {
	if from == 0 {
		from = 1
	}
	fail := func(err error) ([]*bus.Message, error) {
		return nil, fmt.Errorf("range %s from %d: %w", filter, from, translate(err))
	}
	out := make([]*bus.Message, 0, min(max, 64))
	size := 0 // of the payloads in out
	for len(out) < max && size < bus.RangeBytes {
		// The server ends a batch at the message that reaches its byte
		// bound; without one it would send up to its pending limit at
		// once, enough to have this connection cut as a slow consumer.
		maxBytes := bus.RangeBytes - size
		if l.batchBytes > 0 {
			maxBytes = min(maxBytes, l.batchBytes)
		}
		var got []*bus.Message
		var pending, suspect bool
		err := withRetry(ctx, func(ctx context.Context) (err error) {
			nc, done := l.reader()
			defer done()
			got, pending, suspect, err = directBatch(ctx, nc, l.inboxes, l.stream, filter, from, max-len(out), maxBytes)
			return err
		})
		if err != nil {
			return fail(err)
		}
		out = append(out, got...)
		size += bus.PayloadBytes(got)
		if n := len(got); n > 0 {
			from = got[n-1].Seq + 1
		}
		switch {
		case len(out) == max || size >= bus.RangeBytes:
		case len(got) == 0 && len(out) == 0 && !confirmEmpty && !suspect:
		case suspect || len(got) == 0:
			// A batch stopped at something that does not add up, or came
			// back empty — which a replica lagging behind, or one closing
			// under the request, also answers: the leader says whether
			// there is a next match.
			m, err := l.leaderGet(ctx, directRequest{Seq: from, NextFor: filter})
			if errors.Is(err, errs.ErrNotFound) {
				return out, nil
			}
			if err != nil {
				return fail(err)
			}
			out = append(out, m)
			size += len(m.Data)
			from = m.Seq + 1
			continue
		case pending && len(got) > 0:
			continue
		}
		break
	}
	return out, nil
}

// followPoll is how often Follow reads what is new when nothing else
// has it read; followBatch how much it reads at once.
const (
	followPoll  = 100 * time.Millisecond
	followBatch = 500
)

// Follow implements bus.Log by handing over, in order, the messages from
// from on: nothing is skipped or repeated. A loop of the whole stream
// (filter ">") whose stream republishes what it stores whole
// (streams/01-commands.yaml, 02-events.yaml) takes each message from that
// word, as the server stored it, without a read; it reads the log from
// the sequence after the last message handed over when a word is missing
// (a later one comes first), when its queue of words was full, and
// followPoll after the last word; this Log's appends wake it until a word
// brings a message, and again after its poll finds messages no word
// brought. Any other loop reads the log every followPoll, at once after
// the server's word that it stored a message the filter takes (a
// headers-only word), at once after this Log appended one, and at once
// again after a full batch. Not an ordered
// consumer: nats.go takes a stored message with an empty payload and a
// Status header such as "409 Consumer Deleted" for the server's status,
// recreates the consumer at that same message and loops on it; reads take
// every message for what it is (see direct.go). A failed read is logged
// and tried again at the next poll.
func (l *Log) Follow(ctx context.Context, filter string, from uint64, fn func(*bus.Message)) {
	f, stop := l.follow(filter)
	l.listenForWord()
	go func() {
		defer stop()
		next := max(from, 1)
		poll := time.NewTimer(followPoll)
		defer poll.Stop()
		read, polled := true, false
		for {
			if read {
				msgs, err := l.read(ctx, filter, next, followBatch, false)
				if polled && len(msgs) > 0 && f.stored != nil {
					// No word brought these: appends wake again, from
					// before the first of them is handed over.
					l.wordHeard.Store(false)
				}
				for _, m := range msgs {
					fn(m)
					next = m.Seq + 1
				}
				switch {
				case err != nil && ctx.Err() == nil && l.log != nil:
					l.log.Warn("following the log failed; trying again", "filter", filter, "from", next, "err", err)
				case err == nil && bus.Full(msgs, followBatch):
					continue
				}
				read, polled = false, false
			}
			select {
			case <-ctx.Done():
				return
			case <-poll.C:
				read, polled = true, true
				poll.Reset(followPoll)
			case <-f.wake:
				read = true
			case m := <-f.stored:
				f.storedBytes.Add(-int64(len(m.Data)))
				switch {
				case m.Seq == next:
					fn(m)
					next++
					poll.Reset(followPoll)
				case m.Seq > next: // a word went missing: read from next on, m among them
					read = true
				}
			}
		}
	}()
}

// LastSeq implements bus.Log, retried like every read.
func (l *Log) LastSeq(ctx context.Context) (uint64, error) {
	nc, done := l.reader()
	defer done()
	var last uint64
	err := storeRetry.run(ctx, func(try time.Duration) (err error) {
		last, err = streamLastSeq(ctx, nc, l.stream, try)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("stream %s: last sequence: %w", l.stream, translate(err))
	}
	return last, nil
}
