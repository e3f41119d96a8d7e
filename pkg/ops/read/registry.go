package read

import (
	"context"
	"errors"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops/op"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/query"
	"github.com/agentbus/agentbus/pkg/webhook/record"
)

// Registry answers the reads of the registries: agents, services,
// subscriptions, a subscription's signing secret and its deliveries.
// Safe for concurrent use.
type Registry struct {
	p RegistryPorts
}

// RegistryPorts are what the registry reads read.
type RegistryPorts struct {
	Registries *projection.Registries
	// Secrets read a subscription's current signing secret.
	Secrets Secrets
	// Deliveries find a subscription's delivery records; Records gives
	// them their wire form (query.Reader.DeliveryRecords).
	Deliveries Deliveries
	Records    func(tenant string, recs []record.Delivery) []query.DeliveryRecord
	// CommandConsumers are the command log's consumers: getAgent reads
	// the agent's to say what is pending. Nil: getAgent says nothing of it.
	CommandConsumers bus.ConsumerAdmin
	// PageDefault and PageMax bound pages; default 100 and 1000.
	PageDefault, PageMax int
}

// Secrets read the signing secrets of webhook subscriptions.
type Secrets interface {
	// Current returns the current secret of subscription id;
	// errs.ErrNotFound when it has none.
	Current(ctx context.Context, tenant, id string) (string, error)
}

// Deliveries find the delivery records of a subscription.
type Deliveries interface {
	OfSubscription(ctx context.Context, tenant, id string) ([]record.Delivery, error)
}

// NewRegistry returns the registry reads on p.
func NewRegistry(p RegistryPorts) *Registry {
	if p.PageDefault <= 0 {
		p.PageDefault = 100
	}
	if p.PageMax <= 0 {
		p.PageMax = 1000
	}
	return &Registry{p: p}
}

// List is listAgents (aggType decide.AggAgent) or listServices.
func (g *Registry) List(aggType string) op.Handle {
	return func(_ context.Context, r *op.Request) (*op.Response, error) {
		limit, after, err := g.page(r)
		if err != nil {
			return nil, err
		}
		body := map[string]any{}
		var next string
		if aggType == decide.AggAgent {
			body["agents"], next = g.p.Registries.Agents.List(r.Tenant, after, limit)
		} else {
			body["services"], next = g.p.Registries.Services.List(r.Tenant, after, limit)
		}
		if next != "" {
			body["next"] = next
		}
		return &op.Response{Body: body}, nil
	}
}

// AgentView is getAgent's answer: the agent's record and, when known,
// what is pending for it.
type AgentView struct {
	decide.Agent
	Pending *AgentPending `json:"pending,omitempty"`
}

// AgentPending is what waits for an agent on its consumer of the command
// log: commands not yet delivered to it (Commands; they queue while it is
// paused) and commands delivered and not yet acknowledged (InFlight).
type AgentPending struct {
	Commands uint64 `json:"commands"`
	InFlight int    `json:"inFlight"`
}

// pendingWait bounds getAgent's read of what is pending.
const pendingWait = time.Second

// pending reads what waits for agent id of tenant; nil when its consumer
// cannot be read (not made yet, NATS unreachable): the record is served
// without it.
func (g *Registry) pending(ctx context.Context, tenant, id string) *AgentPending {
	if g.p.CommandConsumers == nil {
		return nil
	}
	// The record is served from memory: what is pending waits on NATS at
	// most pendingWait, and the record goes without it past that.
	ctx, cancel := context.WithTimeout(ctx, pendingWait)
	defer cancel()
	st, err := g.p.CommandConsumers.Consumer(ctx, bus.AgentConsumer(tenant, id))
	if err != nil {
		return nil
	}
	return &AgentPending{Commands: st.NumPending, InFlight: st.NumAckPending}
}

// Get is getAgent (aggType decide.AggAgent) or getService.
func (g *Registry) Get(aggType string) op.Handle {
	return func(ctx context.Context, r *op.Request) (*op.Response, error) {
		id := r.Param("id")
		if err := op.CheckID(id); err != nil {
			return nil, err
		}
		if aggType == decide.AggAgent {
			if rec, ok := g.p.Registries.Agents.Get(r.Tenant, id); ok {
				return &op.Response{Body: AgentView{Agent: rec, Pending: g.pending(ctx, r.Tenant, id)}}, nil
			}
			return nil, errs.New(errs.CodeAgentNotFound, "agent %q is not registered", id)
		}
		if rec, ok := g.p.Registries.Services.Get(r.Tenant, id); ok {
			return &op.Response{Body: rec}, nil
		}
		return nil, errs.New(errs.CodeServiceNotFound, "service %q is not registered", id)
	}
}

// ListSubscriptions is listSubscriptions.
func (g *Registry) ListSubscriptions(_ context.Context, r *op.Request) (*op.Response, error) {
	limit, after, err := g.page(r)
	if err != nil {
		return nil, err
	}
	list, next := g.p.Registries.Subscriptions.List(r.Tenant, after, limit)
	body := map[string]any{"subscriptions": list}
	if next != "" {
		body["next"] = next
	}
	return &op.Response{Body: body}, nil
}

// GetSubscription is getSubscription.
func (g *Registry) GetSubscription(_ context.Context, r *op.Request) (*op.Response, error) {
	rec, err := g.subscription(r)
	if err != nil {
		return nil, err
	}
	return &op.Response{Body: rec}, nil
}

// Secret is getSubscriptionSecret: the current signing secret of a
// subscription the registry knows, marked Private, the one answer that
// carries a secret.
func (g *Registry) Secret(ctx context.Context, r *op.Request) (*op.Response, error) {
	sub, err := g.subscription(r)
	if err != nil {
		return nil, err
	}
	secret, err := g.p.Secrets.Current(ctx, r.Tenant, sub.ID)
	switch {
	case errors.Is(err, errs.ErrNotFound): // deleted meanwhile
		return nil, op.SubscriptionNotFound(sub.ID)
	case err != nil:
		return nil, errs.Internal(err)
	}
	return &op.Response{Body: map[string]string{"id": sub.ID, "secret": secret}, Private: true}, nil
}

// Deliveries is listDeliveries.
func (g *Registry) Deliveries(ctx context.Context, r *op.Request) (*op.Response, error) {
	sub, err := g.subscription(r)
	if err != nil {
		return nil, err
	}
	recs, err := g.p.Deliveries.OfSubscription(ctx, r.Tenant, sub.ID)
	if err != nil {
		return nil, errs.Internal(err)
	}
	return &op.Response{Body: map[string]any{"deliveries": g.p.Records(r.Tenant, recs)}}, nil
}

// subscription returns the subscription of the request's id, or
// SUBSCRIPTION_NOT_FOUND.
func (g *Registry) subscription(r *op.Request) (decide.Subscription, error) {
	id := r.Param("id")
	if err := op.CheckID(id); err != nil {
		return decide.Subscription{}, err
	}
	sub, ok := g.p.Registries.Subscriptions.Get(r.Tenant, id)
	if !ok {
		return sub, op.SubscriptionNotFound(id)
	}
	return sub, nil
}

// page reads a list operation's page parameters: limit (default
// PageDefault) and after (a cursor a previous page returned as next).
func (g *Registry) page(r *op.Request) (limit int, after string, err error) {
	limit, v := query.ParseLimit(r.Param("limit"), g.p.PageDefault, g.p.PageMax, nil)
	after = r.Param("after")
	if after != "" && !envelope.ValidTokenID(after) {
		v = append(v, errs.Violation{Path: "after", Message: "must be a cursor returned as next"})
	}
	if len(v) > 0 {
		return 0, "", errs.Invalid("invalid query parameters", v)
	}
	return limit, after, nil
}
