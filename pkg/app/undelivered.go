package app

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// maxDeliveries is what JetStream's max-deliveries advisory says of a
// message a consumer delivered as often as its max_deliver allows without
// an ack.
type maxDeliveries struct {
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// RejectUndelivered handles the advisories of the undelivered stream: a
// command an agent's consumer delivered max_deliver times without an ack
// gets its terminal outcome, a CommandRejected event (SERVICE_UNAVAILABLE),
// unless the command has events by now (the agent wrote them but its acks
// were lost). Advisories of other consumers are left alone: whoever runs
// them decides what their commands' outcome is.
func (a *App) RejectUndelivered(ctx context.Context, d bus.Delivery) {
	var adv maxDeliveries
	if err := json.Unmarshal(d.Message().Data, &adv); err != nil || adv.StreamSeq == 0 ||
		!strings.HasPrefix(adv.Consumer, agentConsumerPrefix) || a.p.Commands == nil {
		_ = d.Ack(ctx)
		return
	}
	m, err := a.p.Commands.Get(ctx, adv.StreamSeq)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		_ = d.Ack(ctx) // aged out of the command log: nothing left to reject
		return
	case err != nil:
		a.settle(ctx, d, err, "read an undelivered command")
		return
	}
	a.settle(ctx, d, a.rejectUndelivered(ctx, m, adv), "reject an undelivered command")
}

func (a *App) rejectUndelivered(ctx context.Context, m *bus.Message, adv maxDeliveries) error {
	cmd, ok := a.commandHead(m)
	if !ok {
		return nil
	}
	// The consumer must be the one agentbus keeps for an agent of the
	// command's tenant (agentbus owns the durable names agent_*).
	agent, ok := strings.CutPrefix(adv.Consumer, AgentConsumerName(cmd.Tenant, ""))
	if !ok || !envelope.ValidTokenID(agent) {
		return nil
	}
	// An advisory is anyone's word who may publish on its subject: the
	// consumer must exist, take this command and have delivered it.
	if a.p.Consumers != nil {
		st, err := a.p.Consumers.Consumer(ctx, adv.Consumer)
		if errors.Is(err, errs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !slices.Contains(st.Filters, m.Subject) || m.Seq > st.Delivered {
			a.log.Warn("max-deliveries advisory does not match its consumer; ignored", "consumer", adv.Consumer, "seq", m.Seq)
			return nil
		}
	}
	_ = readEnvelope(&cmd, m.Data) // invalid or not, the rejection is the same
	if cmd.CorrelationID == "" || a.processedBefore(ctx, cmd.Tenant, cmd.CorrelationID, true) {
		return nil
	}
	why := errs.New(errs.CodeUnavailable, "agent %q did not acknowledge the command after %d deliveries", agent, adv.Deliveries)
	a.log.Warn("command undelivered; rejecting it", "correlationId", cmd.CorrelationID, "consumer", adv.Consumer, "deliveries", adv.Deliveries)
	return a.reject(ctx, cmd, why)
}
