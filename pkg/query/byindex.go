package query

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// eventsByIndex reads a page of a tenant's events of types (every type
// when none) after sequence after with the type index
// (project.TypeIndex): the events at the sequences it finds, at most limit
// of them, and about bus.RangeBytes. ended says the page ends at its last
// event; otherwise from is the sequence up to which the index held every
// event (after, at least), for the rest of the page to be read from the
// log after it.
func (rd *Reader) eventsByIndex(ctx context.Context, tenant string, types []string, after uint64, limit int) (out []*bus.Message, from uint64, ended bool, err error) {
	seqs, through := rd.p.TypeIndex.Find(tenant, types, after, limit)
	size := 0
	tenantEvents := rd.subj.Prefix + "." + bus.RootEvents + "." + tenant + "."
	err = eventsAt(ctx, rd.p.Events, seqs, func(m *bus.Message) bool {
		// The index is a replica's own: an event at one of its sequences
		// that is not the tenant's, or not of the types, is left out
		// rather than served (an index kept across a change of the log
		// under it would point elsewhere).
		if !strings.HasPrefix(m.Subject, tenantEvents) {
			return true
		}
		if _, typ, ok := rd.subj.TypedEvent(bus.RootEvents, m.Subject); len(types) > 0 && (!ok || !slices.Contains(types, typ)) {
			return true
		}
		out, size = append(out, m), size+len(m.Data)
		return size < bus.RangeBytes
	})
	if err != nil {
		return nil, 0, false, err
	}
	if len(seqs) == limit || size >= bus.RangeBytes {
		return out, 0, true, nil
	}
	return out, max(through, after), false, nil
}

// Reading events at given sequences: a run of sequences no sparser than
// one in runDensity is read as batches of the whole log (the unwanted
// messages dropped), alone; lone sequences are read by get, up to
// fetchReaders side by side.
const (
	runDensity   = 4
	fetchReaders = 8
)

// eventsAt reads the messages of log at seqs (ascending) and hands them to
// keep in order until keep returns false; a sequence with no message is
// skipped. It reads about bus.RangeBytes of them at most (and lone
// messages of at most fetchReaders side by side) before keep says to stop.
func eventsAt(ctx context.Context, log bus.Log, seqs []uint64, keep func(*bus.Message) bool) error {
	var runs [][]uint64
	for i := 0; i < len(seqs); {
		j := i + 1
		for j < len(seqs) && seqs[j]-seqs[i] < uint64(runDensity*(j-i+1)) {
			j++
		}
		runs = append(runs, seqs[i:j])
		i = j
	}
	handed := 0 // payload bytes handed to keep
	for len(runs) > 0 {
		n := 1
		for len(runs[0]) == 1 && n < min(len(runs), fetchReaders) && len(runs[n]) == 1 {
			n++
		}
		wave := runs[:n]
		runs = runs[n:]
		got := make([][]*bus.Message, len(wave))
		failed := make([]error, len(wave))
		budget := max(bus.RangeBytes-handed, 1)
		if len(wave) == 1 {
			got[0], failed[0] = readRun(ctx, log, wave[0], budget)
		} else {
			var wg sync.WaitGroup
			for i, r := range wave {
				wg.Go(func() { got[i], failed[i] = readRun(ctx, log, r, budget) })
			}
			wg.Wait()
		}
		for i := range wave {
			if failed[i] != nil {
				return failed[i]
			}
			for _, m := range got[i] {
				handed += len(m.Data)
				if !keep(m) {
					return nil
				}
			}
		}
	}
	return nil
}

// readRun reads the messages at seqs (ascending), by get when it is one,
// else by batches of the whole log from the first to the last, until their
// payloads come to maxBytes.
func readRun(ctx context.Context, log bus.Log, seqs []uint64, maxBytes int) ([]*bus.Message, error) {
	if len(seqs) == 1 {
		m, err := log.Get(ctx, seqs[0])
		if errors.Is(err, errs.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []*bus.Message{m}, nil
	}
	out := make([]*bus.Message, 0, len(seqs))
	size := 0
	from, last := seqs[0], seqs[len(seqs)-1]
	for from <= last && size < maxBytes {
		// ">": the server counts what is pending after a full wildcard
		// without a pass over the messages.
		ms, err := log.Range(ctx, ">", from, int(last-from+1))
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if m.Seq > last {
				break
			}
			if _, ok := slices.BinarySearch(seqs, m.Seq); ok {
				out, size = append(out, m), size+len(m.Data)
			}
		}
		if len(ms) == 0 {
			break
		}
		from = ms[len(ms)-1].Seq + 1
	}
	return out, nil
}
