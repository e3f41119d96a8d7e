package projection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// History is the correlation index on the replica's disk: the receipt of
// every command in the logs, however old, projected by following the
// command log (the command's part) and the event log (its events' part),
// each part on its own key, written by its own follower. Receipts read
// it. Each replica builds its own from the logs, from where its disk left
// off, so nothing of a command stays in the NATS server's memory past the
// logs' duplicate windows. Safe for concurrent use.
type History struct {
	commands bus.Log
	subj     bus.Subjects
	cmds     *diskModel
	evts     *diskModel
	// ready is set once History holds the logs up to where they were at
	// the start (WaitThrough): until then an absent receipt proves
	// nothing.
	ready atomic.Bool
	// mu guards mark and next: mark is the oldest command log sequence
	// learnt of (Appended) that History did not hold when it was learnt,
	// and when; next the highest learnt of since, and when the first of
	// those was. When History holds mark, next takes its place.
	mu         sync.Mutex
	mark, next watermark
}

// watermark is a command log sequence History learnt of, and when.
type watermark struct {
	seq uint64
	at  time.Time
}

// NewHistory returns the correlation index on disk, following commands
// (the command log) and, from Start's tail, the event log.
func NewHistory(disk bus.Disk, commands bus.Log, subj bus.Subjects, log *slog.Logger) *History {
	return &History{commands: commands, subj: subj,
		cmds: newDiskModel(disk, "correlation index (commands)", log),
		evts: newDiskModel(disk, "correlation index (events)", log)}
}

// Progress returns the sequences of the command log and the event log
// the disk holds, as they were left, before Start.
func (h *History) Progress() (commands, events uint64, err error) {
	if commands, err = h.cmds.load(); err != nil {
		return 0, 0, err
	}
	events, err = h.evts.load()
	return commands, events, err
}

// Start follows the command log and, from tail, the event log, each from
// where the disk left off, until ctx ends. It returns at once unless the
// disk cannot be read.
func (h *History) Start(ctx context.Context, tail bus.Tail) error {
	cmdFrom, evtFrom, err := h.Progress()
	if err != nil {
		return err
	}
	go h.cmds.run(ctx)
	go h.evts.run(ctx)
	h.commands.Follow(ctx, ">", cmdFrom+1, func(m *bus.Message) { h.addCommand(ctx, m) })
	tail.Follow(ctx, ">", evtFrom+1, func(ev *bus.Event) { h.addEvent(ctx, ev.Message) })
	return nil
}

// WaitThrough waits until History holds the command log up to commands
// and the event log up to events, or ctx ends; once it has returned nil,
// History answers for every command.
func (h *History) WaitThrough(ctx context.Context, commands, events uint64) error {
	if err := h.cmds.waitThrough(ctx, commands); err != nil {
		return err
	}
	if err := h.evts.waitThrough(ctx, events); err != nil {
		return err
	}
	h.ready.Store(true)
	return nil
}

// Appended tells History that the command log holds a message at seq (a
// command this replica stored, or the log's end as a look found it), for
// Current.
func (h *History) Appended(seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.promoteLocked()
	now := time.Now()
	switch {
	case h.mark.seq == 0:
		if seq > h.cmds.through.Load() {
			h.mark = watermark{seq, now}
		}
	case seq <= h.mark.seq:
	case h.next.seq == 0:
		h.next = watermark{seq, now}
	case seq > h.next.seq:
		h.next.seq = seq // learnt later: next keeps the time of its first
	}
}

// promoteLocked drops the marks History holds, next taking mark's place.
func (h *History) promoteLocked() {
	through := h.cmds.through.Load()
	for h.mark.seq != 0 && h.mark.seq <= through {
		h.mark, h.next = h.next, watermark{}
	}
}

// Current reports whether History holds the command log, as far as it
// knows: ready, and no message it learnt of (Appended) more than maxLag
// ago is still missing. A History whose follower of the command log
// stopped, or lags, turns not current within maxLag of learning of a
// message it does not hold.
func (h *History) Current(maxLag time.Duration) bool {
	if !h.ready.Load() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.promoteLocked()
	return h.mark.seq == 0 || time.Since(h.mark.at) <= maxLag
}

// Watch looks at the command log's end every period until ctx ends and
// tells Appended, so that Current knows of the commands other replicas
// store while this one stores none.
func (h *History) Watch(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if last, err := h.commands.LastSeq(ctx); err == nil && last > 0 {
				h.Appended(last)
			}
		}
	}
}

// Through returns the sequences of the command log and the event log up
// to which History holds them on disk.
func (h *History) Through() (commands, events uint64) {
	return h.cmds.through.Load(), h.evts.through.Load()
}

// addCommand records the command part of m's receipt, unless a copy of
// the command recorded it before (the first copy stays the command).
func (h *History) addCommand(ctx context.Context, m *bus.Message) {
	tenant, corr, change, ok := commandChange(h.subj, m)
	h.addPart(ctx, h.cmds, m, tenant, corr, partCommand, change, ok)
}

// addEvent adds m to its command's events part.
func (h *History) addEvent(ctx context.Context, m *bus.Message) {
	tenant, corr, change, ok := eventChange(h.subj, m)
	h.addPart(ctx, h.evts, m, tenant, corr, partEvents, change, ok)
}

// addPart applies change, which message m of model's log makes, to a part
// of the receipt of (tenant, corr) on model, bringing the model to m's
// sequence; with ok false, or a change that changes nothing, it only
// brings the model there. The part's UpdatedAt is when the log stored m,
// so that every replica, and a history rebuilt, says the same. A part the
// disk cannot read is read again until ctx ends or the disk is closed,
// and then left with the model short of m (writing over it would lose
// what it holds; the next start reads m again); one read but not decoded
// (damaged) is written anew. A part Accepted found absent moments before
// is not read again.
func (h *History) addPart(ctx context.Context, model *diskModel, m *bus.Message, tenant, corr, part string, change func(*Receipt) bool, ok bool) {
	seq := m.Seq
	if !ok {
		model.advance(seq)
		return
	}
	key := receiptPartKey(tenant, corr, part)
	r := Receipt{CorrelationID: corr, Tenant: tenant, Status: StatusAccepted}
	if !model.knownAbsent(key) {
		for {
			raw, found, err := model.get(key)
			if err == nil {
				if found {
					if held, err := readPart(raw, tenant, corr); err == nil { // a damaged part is written anew
						r = *held
					}
				}
				break
			}
			if errors.Is(err, bus.ErrDiskClosed) {
				return // the replica stops: the next start reads m again
			}
			model.log.Error("reading a receipt on the replica's disk failed; retrying", "correlationId", corr, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(diskRetry):
			}
		}
	}
	if !change(&r) {
		model.advance(seq)
		return
	}
	r.UpdatedAt = m.Time.UTC()
	if m.Time.IsZero() {
		r.UpdatedAt = time.Now().UTC()
	}
	model.put(ctx, seq, bus.DiskWrite{Key: key, Val: AppendReceiptPart(nil, &r)})
}

// errCatchingUp is the answer of Get and Processed until History holds the
// logs up to where they were at the start.
var errCatchingUp = fmt.Errorf("the correlation index is catching up with the logs: %w", errs.ErrUnavailable)

// Get returns the receipt of a command as the logs hold it, or
// errs.ErrNotFound; errs.ErrUnavailable until History holds the logs up
// to where they were at the start.
func (h *History) Get(tenant, corr string) (*Receipt, error) {
	if !h.ready.Load() {
		return nil, errCatchingUp
	}
	// Two point reads, not a scan of the receipt's keys: a point read of
	// an absent key (a new command's, on every POST /commands) is
	// answered by the tables' Bloom filters.
	cmd, err := h.part(h.cmds, tenant, corr, partCommand)
	if err != nil {
		return nil, err
	}
	evts, err := h.part(h.evts, tenant, corr, partEvents)
	switch {
	case err != nil:
		return nil, err
	case cmd == nil && evts == nil:
		return nil, errs.ErrNotFound
	case cmd == nil:
		return evts, nil
	case evts != nil:
		cmd.Status, cmd.Rejection, cmd.Events, cmd.UpdatedAt = evts.Status, evts.Rejection, evts.Events, evts.UpdatedAt
		if cmd.CommandSeq == 0 {
			cmd.CommandSeq = evts.CommandSeq
		}
		if cmd.Type == "" {
			cmd.Type = evts.Type
		}
	}
	return cmd, nil
}

// Accepted reports whether History holds a receipt of (tenant, corr):
// its command's part, or else its events' part, damaged or not (its key
// is the command's). A part found absent is
// noted (diskModel.getNoting), so that its follower, about to write a new
// command's part, does not read it again. errs.ErrUnavailable as Get.
func (h *History) Accepted(tenant, corr string) (bool, error) {
	if !h.ready.Load() {
		return false, errCatchingUp
	}
	for _, p := range []struct {
		model *diskModel
		part  string
	}{{h.cmds, partCommand}, {h.evts, partEvents}} {
		_, found, err := p.model.getNoting(receiptPartKey(tenant, corr, p.part))
		if err != nil || found {
			return found, err
		}
	}
	return false, nil
}

// Processed reports whether the receipt of a command lists events (it
// was processed or rejected), from its events' part alone: one point read
// where Get makes two. errs.ErrUnavailable as Get.
func (h *History) Processed(tenant, corr string) (bool, error) {
	if !h.ready.Load() {
		return false, errCatchingUp
	}
	evts, err := h.part(h.evts, tenant, corr, partEvents)
	if err != nil || evts == nil {
		return false, err
	}
	return len(evts.Events) > 0, nil
}

// part returns one part of a command's receipt from model, written or
// still pending, or nil.
func (h *History) part(model *diskModel, tenant, corr, part string) (*Receipt, error) {
	raw, found, err := model.get(receiptPartKey(tenant, corr, part))
	if err != nil || !found {
		return nil, err
	}
	return readPart(raw, tenant, corr)
}

// readPart decodes raw, the part of the receipt of (tenant, corr) its key
// names.
func readPart(raw []byte, tenant, corr string) (*Receipt, error) {
	r := Receipt{CorrelationID: corr, Tenant: tenant}
	if err := ReadReceiptPart(raw, &r); err != nil {
		return nil, fmt.Errorf("receipt %s on disk: %w", corr, err)
	}
	return &r, nil
}

// receiptPartKey is the key of a part of a command's receipt on disk.
func receiptPartKey(tenant, corr, part string) []byte {
	return diskKey(keyReceipt, Key(tenant, corr), part)
}
