package projection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/settle"
)

// SourceCascade is the envelope source of the commands the subscription
// cascade sends.
const SourceCascade = "agentbus/subscriptions"

// SecretEraser erases the signing secret of a subscription (pkg/secrets);
// erasing one that is not there is not an error.
type SecretEraser interface {
	Delete(ctx context.Context, tenant, id string) error
}

// SubscriptionCascade is the reaction (durable consumer "subscriptions",
// streams/51-subscriptions.yaml) that keeps subscriptions in line with their
// services and erases the secrets no subscription needs:
//
//   - ServiceDeleted: every subscription of the tenant that carries the
//     service's id and was created before the deletion gets a
//     DeleteSubscription command;
//   - SubscriptionCreated carrying a serviceId: when the service's
//     registration it was made against was deleted before it was stored
//     (created and deleted concurrently: its decider saw the service, the
//     deletion landed before it), it gets a DeleteSubscription too;
//   - SubscriptionDeleted: its secret is erased;
//   - CommandRejected of a CreateSubscription: the secret stored for the
//     subscription that was not created is erased.
//
// Its commands have a deterministic source and id per subscription, so
// sending one again (a redelivery, both reasons at once) is the same
// command. Safe for concurrent use.
type SubscriptionCascade struct {
	events   bus.Log
	commands bus.Log
	subs     *Registry[decide.Subscription]
	secrets  SecretEraser
	subj     bus.Subjects
	log      *slog.Logger
	now      func() time.Time
}

// NewSubscriptionCascade returns the cascade reading the event log and the
// subscriptions registry and appending to the command log.
func NewSubscriptionCascade(events, commands bus.Log, subs *Registry[decide.Subscription], secrets SecretEraser, subj bus.Subjects, log *slog.Logger) *SubscriptionCascade {
	return &SubscriptionCascade{events: events, commands: commands, subs: subs, secrets: secrets, subj: subj, log: log, now: time.Now}
}

// maxCascadeDeliveries bounds the tries of one event (about eight
// minutes with the policy's backoff), unless NATS is unavailable.
const maxCascadeDeliveries = 50

// errNotYet asks for a retry: something this depends on is not projected yet.
var errNotYet = errors.New("not projected yet")

// Policy is how the subscriptions consumer settles: failures are retried
// with a growing pause, and given up (with an error in the log) after
// maxCascadeDeliveries unless NATS itself is unavailable.
func (c *SubscriptionCascade) Policy() settle.Policy {
	return settle.Policy{
		What: "cascade a subscription change", Log: c.log,
		Backoff:  settle.Linear(200*time.Millisecond, 10*time.Second),
		Attempts: maxCascadeDeliveries,
		Endless:  func(err error) bool { return errors.Is(err, errs.ErrUnavailable) },
		Alarm:    func(err error, n uint64) bool { return !errors.Is(err, errNotYet) || n > 5 },
	}
}

// Project handles one event of the consumer's filter; any other changes
// nothing. It fails while the work is not done.
func (c *SubscriptionCascade) Project(ctx context.Context, m *bus.Message) error {
	tenant, aggType, id, typ, ok := c.subj.ParseEvent(m.Subject)
	if !ok {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 8*time.Second) // below the consumer's ack_wait
	defer cancel()
	var err error
	switch {
	case aggType == decide.AggService && typ == decide.TypeServiceDeleted:
		err = c.serviceDeleted(rctx, tenant, id, m.Seq)
	case aggType == decide.AggSubscription && typ == decide.TypeSubscriptionCreated:
		err = c.created(rctx, tenant, id, m)
	case aggType == decide.AggSubscription && typ == decide.TypeSubscriptionDeleted:
		err = c.secrets.Delete(rctx, tenant, id)
	case aggType == bus.NoAggregate && typ == decide.TypeCommandRejected:
		err = c.rejected(rctx, tenant, m)
	}
	if err != nil {
		return fmt.Errorf("%s %s of tenant %s: %w", aggType, id, tenant, err)
	}
	return nil
}

// serviceDeleted deletes the subscriptions of tenant carrying service
// svc that were created before its deletion at seq. Those created after
// it belong to a later registration of the id, or raced with the
// deletion: created decides about them.
func (c *SubscriptionCascade) serviceDeleted(ctx context.Context, tenant, svc string, seq uint64) error {
	if err := c.subs.Current(ctx, seq); err != nil {
		return err
	}
	var ids []string
	c.subs.Each(tenant, func(s decide.Subscription) bool {
		if s.ServiceID == svc {
			ids = append(ids, s.ID)
		}
		return true
	})
	for _, id := range ids {
		created, err := c.events.Last(ctx, c.subj.Event(bus.RootEvents, tenant, decide.AggSubscription, id, decide.TypeSubscriptionCreated))
		switch {
		case errors.Is(err, errs.ErrNotFound):
			continue
		case err != nil:
			return err
		case created.Seq > seq:
			continue
		}
		if err := c.deleteSubscription(ctx, tenant, id); err != nil {
			return err
		}
	}
	return nil
}

// created deletes subscription id, created by m, when the registration of
// its service that was current when m was stored — the last
// ServiceRegistered before m — had been deleted by then, or there was
// none.
func (c *SubscriptionCascade) created(ctx context.Context, tenant, id string, m *bus.Message) error {
	data, err := decide.EventData(m)
	var d decide.SubscriptionCreatedData
	if err != nil || json.Unmarshal(data, &d) != nil || d.ServiceID == "" || !envelope.ValidTokenID(d.ServiceID) {
		return nil
	}
	var registered, deleted uint64
	filter := c.subj.Aggregate(tenant, decide.AggService, d.ServiceID)
	for from := uint64(1); from < m.Seq; {
		msgs, err := c.events.Range(ctx, filter, from, replayBatch)
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			break
		}
		for _, e := range msgs {
			if e.Seq >= m.Seq {
				break
			}
			switch _, _, _, typ, _ := c.subj.ParseEvent(e.Subject); typ {
			case decide.TypeServiceRegistered:
				registered = e.Seq
			case decide.TypeServiceDeleted:
				deleted = e.Seq
			}
		}
		from = msgs[len(msgs)-1].Seq + 1
	}
	if registered != 0 && deleted < registered {
		return nil
	}
	c.log.Info("subscription created for a service deleted meanwhile; deleting it", "tenant", tenant, "subscription", id, "service", d.ServiceID)
	return c.deleteSubscription(ctx, tenant, id)
}

// rejected erases the secret stored for a CreateSubscription the event
// rejects, unless the subscription exists after all (a CommandRejected
// can be published by anyone with NATS access: it must not erase the
// secret of a subscription that was created).
func (c *SubscriptionCascade) rejected(ctx context.Context, tenant string, m *bus.Message) error {
	data, err := decide.EventData(m)
	var d struct {
		CommandID   string `json:"commandId"`
		CommandType string `json:"commandType"`
	}
	if err != nil || json.Unmarshal(data, &d) != nil || d.CommandType != decide.TypeCreateSubscription || !envelope.ValidTokenID(d.CommandID) {
		return nil
	}
	_, err = c.events.Last(ctx, c.subj.Aggregate(tenant, decide.AggSubscription, d.CommandID))
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return c.secrets.Delete(ctx, tenant, d.CommandID)
	case err != nil:
		return err
	}
	return nil
}

// deleteSubscription sends DeleteSubscription for id unless it is deleted
// already.
func (c *SubscriptionCascade) deleteSubscription(ctx context.Context, tenant, id string) error {
	last, err := c.events.Last(ctx, c.subj.Aggregate(tenant, decide.AggSubscription, id))
	if err != nil {
		return err
	}
	if _, _, _, typ, _ := c.subj.ParseEvent(last.Subject); typ == decide.TypeSubscriptionDeleted {
		return nil
	}
	msg, corr := decide.CommandMessage(c.subj, tenant, SourceCascade, "delete-"+id, decide.TypeDeleteSubscription,
		map[string]string{"id": id}, c.now())
	if _, err := c.commands.Append(ctx, []*bus.Message{msg}, nil); err != nil && !errors.Is(err, errs.ErrDuplicate) {
		return fmt.Errorf("queue DeleteSubscription %s: %w", corr, err)
	}
	return nil
}
