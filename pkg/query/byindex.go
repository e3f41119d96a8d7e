package query

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// eventsByIndex reads a page of a tenant's events of types (every type
// when none) after sequence after with the type index (project.TypeIndex): the
// events at the sequences it finds, at most limit of them, and about
// bus.RangeBytes. It returns the events and from: 0 when the page ends at
// its last event, otherwise the sequence up to which the index held every
// event, for the rest of the page to be read from the log after it.
func (rd *Reader) eventsByIndex(ctx context.Context, tenant string, types []string, after uint64, limit int) ([]*bus.Message, uint64, error) {
	seqs, through := rd.p.TypeIndex.Find(tenant, types, after, limit)
	var out []*bus.Message
	size := 0
	err := eventsAt(ctx, rd.p.Events, seqs, func(m *bus.Message) bool {
		out, size = append(out, m), size+len(m.Data)
		return size < bus.RangeBytes
	})
	if err != nil {
		return nil, 0, err
	}
	if len(seqs) == limit || size >= bus.RangeBytes {
		return out, 0, nil
	}
	return out, max(through, after), nil
}

// Reading events at given sequences: a run of sequences no sparser than
// one in runDensity is read as one batch of the whole log (the unwanted
// messages dropped), the others one by one; up to fetchReaders reads run
// side by side.
const (
	runDensity   = 4
	fetchReaders = 8
)

// eventsAt reads the messages of log at seqs (ascending) and hands them to
// keep in order until keep returns false; a sequence with no message is
// skipped. Reads run ahead of keep by at most fetchReaders runs.
func eventsAt(ctx context.Context, log bus.Log, seqs []uint64, keep func(*bus.Message) bool) error {
	type run struct {
		seqs []uint64
		got  []*bus.Message
		err  error
	}
	var runs []*run
	for i := 0; i < len(seqs); {
		j := i + 1
		for j < len(seqs) && seqs[j]-seqs[i] < uint64(runDensity*(j-i+1)) {
			j++
		}
		runs = append(runs, &run{seqs: seqs[i:j]})
		i = j
	}
	for len(runs) > 0 {
		wave := runs[:min(len(runs), fetchReaders)]
		runs = runs[len(wave):]
		var wg sync.WaitGroup
		for _, r := range wave {
			wg.Go(func() { r.got, r.err = readRun(ctx, log, r.seqs) })
		}
		wg.Wait()
		for _, r := range wave {
			if r.err != nil {
				return r.err
			}
			for _, m := range r.got {
				if !keep(m) {
					return nil
				}
			}
		}
	}
	return nil
}

// readRun reads the messages at seqs (ascending) with batches of the whole
// log from the first to the last, or one get when it is one.
func readRun(ctx context.Context, log bus.Log, seqs []uint64) ([]*bus.Message, error) {
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
	from, last := seqs[0], seqs[len(seqs)-1]
	for from <= last {
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
				out = append(out, m)
			}
		}
		if len(ms) == 0 {
			break
		}
		from = ms[len(ms)-1].Seq + 1
	}
	return out, nil
}
