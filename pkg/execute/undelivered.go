package execute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/settle"
)

// maxDeliveries is what JetStream's max-deliveries advisory says of a
// message a consumer delivered as often as its max_deliver allows without
// an ack.
type maxDeliveries struct {
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// UndeliveredHandler handles the advisories of the undelivered stream: a
// command an agent's consumer delivered max_deliver times without an ack
// gets its terminal outcome, a CommandRejected event (SERVICE_UNAVAILABLE),
// unless the command has events by now (the agent wrote them but its acks
// were lost). Advisories of other consumers are left alone: whoever runs
// them decides what their commands' outcome is.
func (r *Processor) UndeliveredHandler() bus.Handler {
	return settle.Wrap(settle.Policy{What: "reject an undelivered command", Log: r.log}, settle.Func(r.rejectUndelivered))
}

func (r *Processor) rejectUndelivered(ctx context.Context, am *bus.Message) error {
	var adv maxDeliveries
	if err := json.Unmarshal(am.Data, &adv); err != nil || adv.StreamSeq == 0 ||
		!strings.HasPrefix(adv.Consumer, bus.AgentConsumerPrefix) {
		return nil
	}
	m, err := r.p.Commands.Get(ctx, adv.StreamSeq)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return nil // aged out of the command log: nothing left to reject
	case err != nil:
		return fmt.Errorf("read an undelivered command: %w", err)
	}
	cmd, ok := decide.StoredHead(r.subj, m)
	if !ok {
		return nil
	}
	// The consumer must be the one agentbus keeps for an agent of the
	// command's tenant (agentbus owns the durable names agent_*).
	agent, ok := strings.CutPrefix(adv.Consumer, bus.AgentConsumer(cmd.Tenant, ""))
	if !ok || !envelope.ValidTokenID(agent) {
		return nil
	}
	// An advisory is anyone's word who may publish on its subject: the
	// consumer must exist, take this command and have delivered it.
	st, err := r.p.Consumers.Consumer(ctx, adv.Consumer)
	if errors.Is(err, errs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !slices.Contains(st.Filters, m.Subject) || m.Seq > st.Delivered {
		r.log.Warn("max-deliveries advisory does not match its consumer; ignored", "consumer", adv.Consumer, "seq", m.Seq)
		return nil
	}
	_ = decide.ReadEnvelope(&cmd, m.Data) // invalid or not, the rejection is the same
	if cmd.CorrelationID == "" || r.processedBefore(ctx, cmd.Tenant, cmd.CorrelationID, true) {
		return nil
	}
	why := errs.New(errs.CodeUnavailable, "agent %q did not acknowledge the command after %d deliveries", agent, adv.Deliveries)
	r.log.Warn("command undelivered; rejecting it", "correlationId", cmd.CorrelationID, "consumer", adv.Consumer, "deliveries", adv.Deliveries)
	return r.reject(ctx, cmd, why)
}
