package command

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/ops/op"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/reconcile"
	"github.com/google/uuid"
)

// SourceREST is the envelope source of the commands the registry operations
// submit on a caller's behalf.
const SourceREST = "agentbus/rest"

// Registry writes the registries: it registers, pauses, resumes and
// deletes agents and services, creates, deletes and enables webhook
// subscriptions and rotates their secrets, each by submitting the control
// command on the caller's behalf and waiting for its outcome. Safe for
// concurrent use.
type Registry struct {
	cat  *catalog.Catalog
	p    RegistryPorts
	wait time.Duration
	now  func() time.Time
}

// RegistryPorts are what the registry writes use.
type RegistryPorts struct {
	// Ingest queues the control commands.
	Ingest *ingest.Ingest
	// Receipts tell a command's outcome; Registries and AgentConsumers
	// when its effect is seen on this replica.
	Receipts       *projection.Receipts
	Registries     *projection.Registries
	AgentConsumers *reconcile.AgentConsumers
	// ControlPlane says which command types an agent cannot accept, and
	// the tenants' quotas.
	ControlPlane decide.ControlPlane
	// Secrets keep the subscriptions' signing secrets, stored before the
	// command that needs one is queued without it.
	Secrets ingest.SecretStore
	// URLs decides whether a webhook URL may be subscribed.
	URLs ingest.URLChecker
	// Delivery lets a subscription's delivery go on once it is enabled.
	Delivery interface {
		Enable(ctx context.Context, tenant, id string) error
	}
}

// NewRegistry returns the registry writes of cat's control commands on p;
// each waits up to waitTimeout (default 5s) for its outcome before it
// answers "queued" with the trace.
func NewRegistry(cat *catalog.Catalog, waitTimeout time.Duration, p RegistryPorts) *Registry {
	if waitTimeout <= 0 {
		waitTimeout = 5 * time.Second
	}
	return &Registry{cat: cat, p: p, wait: waitTimeout, now: time.Now}
}

var registrationFields = map[string]bool{"id": true, "name": true, "description": true, "accepts": true, "produces": true}

// registrationBody checks a POST /agents or /services body strictly: a JSON
// object with only the registration fields, each key once, valid under the
// command's schema, and for an agent no accepted type that agentbus
// processes itself (the RegisterAgent decider rejects those too, for
// commands that come another way). It returns the command data, with a
// generated id when none was given.
func (g *Registry) registrationBody(entry *catalog.Entry, body []byte) ([]byte, string, error) {
	fields, v, err := bodyObject(body, registrationFields, "id, name, description, accepts, produces")
	if err != nil {
		return nil, "", err
	}
	for _, sv := range entry.Validate(body) {
		sv.Path = "$" + strings.TrimPrefix(sv.Path, "$.data")
		v = append(v, sv)
	}
	var accepts []string
	if entry.Type == decide.TypeRegisterAgent && json.Unmarshal(fields["accepts"], &accepts) == nil {
		for i, t := range accepts {
			if why := g.p.ControlPlane.CannotAccept(t); why != "" {
				v = append(v, errs.Violation{Path: "$.accepts." + strconv.Itoa(i), Message: why})
			}
		}
	}
	if len(v) > 0 {
		sort.SliceStable(v, func(i, j int) bool { return v[i].Path < v[j].Path })
		return nil, "", errs.Invalid("the request body is invalid", v)
	}
	var id string
	if raw, ok := fields["id"]; ok {
		_ = json.Unmarshal(raw, &id)
	} else {
		id = uuid.NewString()
		fields["id"] = decide.MustJSON(id)
	}
	return decide.MustJSON(fields), id, nil
}

// outcome is how a control command submitted by an operation ended.
type outcome struct {
	corr    string
	pending string // status when the wait timed out; "" when done
	seq     uint64 // of the (first) event the command caused
	// consumerFailed: the event is applied, but the agent's consumer could
	// not be made to match it (the agent's record and the trace say why).
	consumerFailed bool
}

// queued is the answer when the outcome is not known in time.
func (o *outcome) queued() *op.Response {
	return &op.Response{Outcome: op.Queued, Body: map[string]string{"id": o.corr, "status": o.pending},
		Location: "/traces/" + o.corr}
}

// waitFor describes what must have happened, beyond the event, before an
// operation answers: its registry applied the event (read-your-writes on this
// replica), for agents the agent's consumer reflects it, and what also
// says holds.
type waitFor struct {
	reg     readModel
	agentID string // set for agent operations
	deleted bool
	// also, when set, waits for the event's further effects once reg
	// applied it, until ctx ends; false when they are not seen by then.
	also func(ctx context.Context) bool
}

// readModel is a read model a write can wait for.
type readModel interface {
	WaitApplied(ctx context.Context, seq uint64) error
}

// runControl submits a control command on the caller's behalf through the
// same path as POST /commands and waits, up to registry.waitTimeout, for its
// outcome. A rejection is returned as the error it carries (so
// AGENT_NOT_FOUND is a 404); a timeout is an outcome with pending set; an
// agent's consumer that could not be made, one with consumerFailed set.
func (g *Registry) runControl(ctx context.Context, tenant string, entry *catalog.Entry, data []byte, w waitFor) (*outcome, error) {
	return g.runEnvelope(ctx, tenant, entry, g.controlEnvelope(entry, data), w)
}

// controlEnvelope is the envelope of a control command an operation
// submits: a fresh id, so a fresh correlation id.
func (g *Registry) controlEnvelope(entry *catalog.Entry, data []byte) *envelope.Envelope {
	return &envelope.Envelope{
		SpecVersion: envelope.SpecVersion, ID: uuid.NewString(), Source: SourceREST, Type: entry.Type,
		DataContentType: envelope.ContentType, DataSchema: entry.Schema + "/" + entry.Version,
		Time: decide.Stamp(g.now()), Data: data,
	}
}

// runEnvelope is runControl for an envelope made by controlEnvelope (an
// operation that needs the correlation id before the command is queued).
func (g *Registry) runEnvelope(ctx context.Context, tenant string, entry *catalog.Entry, env *envelope.Envelope, w waitFor) (*outcome, error) {
	wctx, cancel := context.WithTimeout(ctx, g.wait)
	defer cancel()
	if _, err := g.cat.ResolveCommand(env); err != nil {
		return nil, err
	}
	acc, err := g.p.Ingest.Enqueue(ctx, tenant, env, entry, env.Marshal())
	if err != nil {
		return nil, err
	}
	out := &outcome{corr: acc.ID, pending: projection.StatusAccepted}
	r, err := g.p.Receipts.Await(wctx, tenant, acc.ID)
	if r != nil {
		out.pending = r.Status
	}
	if err != nil {
		if wctx.Err() != nil {
			return out, nil // out of time, or the caller left: the command is queued
		}
		return nil, errs.Internal(err)
	}
	if r.Status == projection.StatusRejected {
		e := rejectionError(r.Rejection)
		e.Details = map[string]any{"correlationId": acc.ID}
		return nil, e
	}
	out.pending = projection.StatusProcessed
	if len(r.Events) == 0 {
		return nil, errs.Internal(errors.New("processed receipt without events"))
	}
	out.seq = r.Events[0]
	if err := w.reg.WaitApplied(wctx, out.seq); err != nil {
		return out, nil
	}
	if w.agentID != "" {
		for wait := 5 * time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
			ok, err := g.p.AgentConsumers.Settled(wctx, tenant, w.agentID, out.seq, w.deleted)
			if ok {
				break
			}
			if errors.Is(err, reconcile.ErrConsumerFailed) {
				out.consumerFailed = true
				break
			}
			if err != nil && wctx.Err() == nil {
				return nil, errs.Internal(err)
			}
			select {
			case <-wctx.Done():
				return out, nil
			case <-time.After(wait):
			}
		}
	}
	if w.also != nil && !w.also(wctx) {
		return out, nil
	}
	out.pending = ""
	return out, nil
}

// rejectionError is the error an operation returns for a command's
// rejection. The rejection comes from a CommandRejected event, which any
// NATS publisher can write: a code that is not one of pkg/errs (or none)
// becomes an INTERNAL_ERROR naming it.
func rejectionError(rej *projection.Rejection) *errs.Error {
	if rej == nil {
		rej = &projection.Rejection{}
	}
	if code := errs.Code(rej.Code); code.Known() {
		return errs.New(code, "%s", rej.Message)
	}
	return errs.New(errs.CodeInternal, "the command was rejected by a processor with an unknown code %q: %s", rej.Code, rej.Message)
}

// Register is registerAgent (aggType decide.AggAgent) or registerService.
func (g *Registry) Register(aggType string) op.Handle {
	return func(ctx context.Context, r *op.Request) (*op.Response, error) {
		regs := g.p.Registries
		typ, reg := decide.TypeRegisterService, waitFor{reg: regs.Services}
		if aggType == decide.AggAgent {
			typ, reg = decide.TypeRegisterAgent, waitFor{reg: regs.Agents}
		}
		entry := latest(g.cat, typ)
		data, id, err := g.registrationBody(entry, r.Body)
		if err != nil {
			return nil, err
		}
		// Past its quota a tenant's registration is refused before it is
		// queued (the decider refuses it too, for commands that come
		// another way); an id that exists is left to the decider's
		// conflict.
		if !g.registered(r.Tenant, aggType, id) {
			if e := g.p.ControlPlane.Quotas.Exceeded(r.Tenant, aggType); e != nil {
				return nil, e
			}
		}
		w := reg
		if aggType == decide.AggAgent {
			w.agentID = id
		}
		out, err := g.runControl(ctx, r.Tenant, entry, data, w)
		if err != nil {
			return nil, err
		}
		if out.pending != "" {
			return out.queued(), nil
		}
		// The registry has applied the registration (read-your-writes).
		var body any
		var ok bool
		if aggType == decide.AggAgent {
			body, ok = regs.Agents.Get(r.Tenant, id)
		} else {
			body, ok = regs.Services.Get(r.Tenant, id)
		}
		if !ok { // deleted again in the meantime: the trace tells the story
			out.pending = projection.StatusProcessed
			return out.queued(), nil
		}
		return &op.Response{Outcome: op.Created, Body: body, Location: "/" + aggType + "s/" + id}, nil
	}
}

// registered reports whether tenant has aggType id registered.
func (g *Registry) registered(tenant, aggType, id string) bool {
	if aggType == decide.AggAgent {
		_, ok := g.p.Registries.Agents.Get(tenant, id)
		return ok
	}
	_, ok := g.p.Registries.Services.Get(tenant, id)
	return ok
}

// Change submits typ (PauseAgent, ResumeAgent, DeleteAgent,
// DeleteService, DeleteSubscription or EnableSubscription) for the id and
// answers Empty once its registry, for an agent its consumer, and for a
// service the deletion of its subscriptions reflect it; Queued when that
// takes longer than registry.waitTimeout in all, or the agent's consumer
// could not be made to reflect it.
func (g *Registry) Change(typ string) op.Handle {
	return func(ctx context.Context, r *op.Request) (*op.Response, error) {
		id := r.Param("id")
		if err := op.CheckID(id); err != nil {
			return nil, err
		}
		w := waitFor{reg: g.p.Registries.Agents, agentID: id, deleted: typ == decide.TypeDeleteAgent}
		switch typ {
		case decide.TypeDeleteService:
			w = waitFor{reg: g.p.Registries.Services,
				also: func(ctx context.Context) bool { return g.serviceSubscriptionsGone(ctx, r.Tenant, id) }}
		case decide.TypeDeleteSubscription, decide.TypeEnableSubscription:
			w = waitFor{reg: g.p.Registries.Subscriptions}
		}
		out, err := g.runControl(ctx, r.Tenant, latest(g.cat, typ), decide.MustJSON(map[string]string{"id": id}), w)
		if typ == decide.TypeEnableSubscription && (err == nil || errs.As(err).Code == errs.CodeSubscriptionActive) {
			// Delivery waits after a 410 until it is enabled: also when
			// the subscription never showed as disabled.
			if eerr := g.p.Delivery.Enable(ctx, r.Tenant, id); eerr != nil {
				return nil, errs.Internal(eerr)
			}
		}
		if err != nil {
			return nil, err
		}
		if out.consumerFailed {
			// Processed, without its effect on the consumer: the trace
			// says why (and the agent's record, "failed").
			out.pending = projection.StatusProcessed
		}
		if out.pending != "" {
			return out.queued(), nil
		}
		return &op.Response{Outcome: op.Empty}, nil
	}
}

// serviceSubscriptionsGone waits, until ctx ends, until this replica's
// subscriptions registry holds no subscription of tenant that carries
// service id — the subscription cascade deletes them — and reports
// whether it does.
func (g *Registry) serviceSubscriptionsGone(ctx context.Context, tenant, id string) bool {
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
		left := false
		g.p.Registries.Subscriptions.Each(tenant, func(sub decide.Subscription) bool {
			left = sub.ServiceID == id
			return !left
		})
		if !left {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// bodyObject splits a request body that must be a JSON object of the
// members allowed (named, in words, by names). It returns the members and
// a violation for each unknown one, or the error of a body that is no
// JSON object. A member given twice is the caller's to refuse: the
// catalogue's Validate does, at any depth, as envelope.CheckData does.
func bodyObject(body []byte, allowed map[string]bool, names string) (map[string]json.RawMessage, []errs.Violation, error) {
	keys, _, fields, err := envelope.SplitObject(body)
	if err != nil {
		if e := errs.As(err); e.Code == errs.CodeValidationFailed {
			return nil, nil, errs.Invalid("the request body is invalid", e.Violations)
		}
		return nil, nil, err
	}
	var v []errs.Violation
	for _, k := range keys {
		if !allowed[k] {
			v = append(v, errs.Violation{Path: "$." + k, Message: "unknown property (allowed: " + names + ")"})
		}
	}
	return fields, v, nil
}
