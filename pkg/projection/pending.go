package projection

import (
	"context"
	"fmt"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
)

// maxPendingScan bounds Pending.Find: past it a command counts as not
// found.
const maxPendingScan = 10_000

// Pending finds commands among those the processor has not acknowledged
// yet.
type Pending struct {
	commands  bus.Log
	consumers bus.ConsumerAdmin // of the command log
	subj      bus.Subjects
}

// NewPending returns the finder on the command log and its consumers.
func NewPending(commands bus.Log, consumers bus.ConsumerAdmin, subj bus.Subjects) *Pending {
	return &Pending{commands: commands, consumers: consumers, subj: subj}
}

// Find returns the command-log sequence of the command matching filter
// with correlation id corr among those the processor has not acknowledged
// yet (every earlier one is processed: its events carry its sequence and
// its receipt exists), or 0 when it is not there. It reads up to
// maxPendingScan commands: callers bound how many run at once.
func (p *Pending) Find(ctx context.Context, filter, corr string) (uint64, error) {
	st, err := p.consumers.Consumer(ctx, bus.ProcessorConsumer)
	if err != nil {
		return 0, fmt.Errorf("processor consumer: %w", err)
	}
	for from, seen := st.AckFloor+1, 0; seen < maxPendingScan; {
		msgs, err := p.commands.Range(ctx, filter, from, replayBatch)
		if err != nil || len(msgs) == 0 {
			return 0, err
		}
		for _, m := range msgs {
			// The id the processor gives the command (decide.ReadEnvelope).
			tenant, _, _ := p.subj.ParseCommand(m.Subject)
			if envelope.ReadLoose(m.Data).CorrelationID(tenant) == corr {
				return m.Seq, nil
			}
		}
		from = msgs[len(msgs)-1].Seq + 1
		seen += len(msgs)
	}
	return 0, nil
}
