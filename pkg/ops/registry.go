package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/project"
	"github.com/agentbus/agentbus/pkg/reconcile"
	"github.com/google/uuid"
)

// SourceREST is the envelope source of the commands the registry operations
// submit on a caller's behalf.
const SourceREST = "agentbus/rest"

func (s *Surface) pageParams() []Param {
	return []Param{
		{Name: "limit", Description: fmt.Sprintf("page size, 1 to %d (default %d)", s.cfg.PageMax, s.cfg.PageDefault)},
		{Name: "after", Description: "cursor: the next value of the previous page (the last id it held)"},
	}
}

// registryOperations are the agents, services and traces operations.
func (s *Surface) registryOperations() []Operation {
	const slow = " Answers queued (202) with the trace's Location when the outcome takes longer than registry.waitTimeout."
	created, changed := []Outcome{Created, Queued}, []Outcome{Empty, Queued}
	agentBody := &Body{Description: "an agent registration: {id?, name, description, accepts, produces}",
		Schema: s.dataSchema(decide.TypeRegisterAgent)}
	serviceBody := &Body{Description: "a service registration: {id?, name, description, accepts, produces}",
		Schema: s.dataSchema(decide.TypeRegisterService)}
	var (
		notFound    = []errs.Code{errs.CodeAgentNotFound}
		svcNotFound = []errs.Code{errs.CodeServiceNotFound}
	)
	return []Operation{
		{ID: "registerAgent", Capability: "agents", Scope: ScopeWrite, Body: agentBody, Outcomes: created,
			Output: "the agent record", Errors: []errs.Code{errs.CodeMalformedJSON, errs.CodeAgentAlreadyRegistered, errs.CodeQuotaExceeded},
			Summary: "Register an agent (RegisterAgent); AGENT_ALREADY_REGISTERED when the id exists, QUOTA_EXCEEDED past the tenant's quota of agents." + slow, Handle: s.opRegister(decide.AggAgent)},
		{ID: "listAgents", Capability: "agents", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: s.pageParams(),
			Output:  "{agents: [agent records], next?: cursor}",
			Summary: "List registered agents by id, a page at a time.", Handle: s.opList(decide.AggAgent)},
		{ID: "getAgent", Capability: "agents", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: []Param{idParam},
			Output: "the agent record", Errors: notFound,
			Summary: "Get an agent; AGENT_NOT_FOUND.", Handle: s.opGet(decide.AggAgent)},
		{ID: "pauseAgent", Capability: "agents", Scope: ScopeWrite, Outcomes: changed, Params: []Param{idParam},
			Errors:  []errs.Code{errs.CodeAgentNotFound, errs.CodeAgentAlreadyPaused},
			Summary: "Pause an agent (PauseAgent): its commands queue up until it is resumed; AGENT_ALREADY_PAUSED." + slow, Handle: s.opChange(decide.TypePauseAgent)},
		{ID: "resumeAgent", Capability: "agents", Scope: ScopeWrite, Outcomes: changed, Params: []Param{idParam},
			Errors:  []errs.Code{errs.CodeAgentNotFound, errs.CodeAgentNotPaused},
			Summary: "Resume a paused agent (ResumeAgent): it gets the commands that queued up; AGENT_NOT_PAUSED." + slow, Handle: s.opChange(decide.TypeResumeAgent)},
		{ID: "deleteAgent", Capability: "agents", Scope: ScopeWrite, Outcomes: changed, Params: []Param{idParam}, Errors: notFound,
			Summary: "Delete an agent and its command consumer (DeleteAgent)." + slow, Handle: s.opChange(decide.TypeDeleteAgent)},
		{ID: "registerService", Capability: "services", Scope: ScopeWrite, Body: serviceBody, Outcomes: created,
			Output: "the service record", Errors: []errs.Code{errs.CodeMalformedJSON, errs.CodeServiceAlreadyExists, errs.CodeQuotaExceeded},
			Summary: "Register a service (RegisterService); SERVICE_ALREADY_REGISTERED when the id exists, QUOTA_EXCEEDED past the tenant's quota of services." + slow, Handle: s.opRegister(decide.AggService)},
		{ID: "listServices", Capability: "services", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: s.pageParams(),
			Output:  "{services: [service records], next?: cursor}",
			Summary: "List registered services by id, a page at a time.", Handle: s.opList(decide.AggService)},
		{ID: "getService", Capability: "services", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: []Param{idParam},
			Output: "the service record", Errors: svcNotFound,
			Summary: "Get a service; SERVICE_NOT_FOUND.", Handle: s.opGet(decide.AggService)},
		{ID: "deleteService", Capability: "services", Scope: ScopeWrite, Outcomes: changed, Params: []Param{idParam}, Errors: svcNotFound,
			Summary: "Delete a service (DeleteService) and the webhook subscriptions that carry its id." + slow, Handle: s.opChange(decide.TypeDeleteService)},
		{ID: "getTrace", Capability: "traces", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Params: []Param{{Name: "id", Description: "the correlation id submitCommand returned", Required: true}},
			Output: "the trace: {id, traceId?, command, status, rejection?, events, deliveries, updatedAt}", Errors: []errs.Code{errs.CodeTraceNotFound},
			Summary: "The life of a command by its correlation id: status, events, webhook deliveries; TRACE_NOT_FOUND.", Handle: s.opTrace},
	}
}

var registrationFields = map[string]bool{"id": true, "name": true, "description": true, "accepts": true, "produces": true}

// registrationBody checks a POST /agents or /services body strictly: a JSON
// object with only the registration fields, each key once, valid under the
// command's schema, and for an agent no accepted type that agentbus
// processes itself (the RegisterAgent decider rejects those too, for
// commands that come another way). It returns the command data, with a
// generated id when none was given.
func (s *Surface) registrationBody(entry *catalog.Entry, body []byte) ([]byte, string, error) {
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
			if why := s.p.ControlPlane.CannotAccept(t); why != "" {
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

// dataSchema is the JSON Schema of the data of the latest version of a
// built-in command type.
func (s *Surface) dataSchema(typ string) map[string]any {
	var doc map[string]any
	_ = json.Unmarshal(s.commandEntry(typ).Doc, &doc) // compiled at load: valid JSON
	return doc
}

func (s *Surface) commandEntry(typ string) *catalog.Entry {
	vs := s.cat.CommandVersions(typ)
	return vs[len(vs)-1] // the built-in catalogue always has it
}

func checkID(id string) error {
	if !envelope.ValidTokenID(id) {
		return errs.Invalid("invalid path parameter", []errs.Violation{{Path: "id", Message: "must be " + decide.IDRule}})
	}
	return nil
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
func (o *outcome) queued() *Response {
	return &Response{Outcome: Queued, Body: map[string]string{"id": o.corr, "status": o.pending},
		Location: "/traces/" + o.corr}
}

// waitFor describes what must have happened, beyond the event, before an
// operation answers: its registry applied the event (read-your-writes on this
// replica), for agents the agent's consumer reflects it, and what also
// says holds.
type waitFor struct {
	reg     projection
	agentID string // set for agent operations
	deleted bool
	// also, when set, waits for the event's further effects once reg
	// applied it, until ctx ends; false when they are not seen by then.
	also func(ctx context.Context) bool
}

// projection is a read model a write can wait for.
type projection interface {
	WaitApplied(ctx context.Context, seq uint64) error
}

// runControl submits a control command on the caller's behalf through the
// same path as POST /commands and waits, up to registry.waitTimeout, for its
// outcome. A rejection is returned as the error it carries (so
// AGENT_NOT_FOUND is a 404); a timeout is an outcome with pending set; an
// agent's consumer that could not be made, one with consumerFailed set.
func (s *Surface) runControl(ctx context.Context, tenant string, entry *catalog.Entry, data []byte, w waitFor) (*outcome, error) {
	return s.runEnvelope(ctx, tenant, entry, s.controlEnvelope(entry, data), w)
}

// controlEnvelope is the envelope of a control command an operation
// submits: a fresh id, so a fresh correlation id.
func (s *Surface) controlEnvelope(entry *catalog.Entry, data []byte) *envelope.Envelope {
	return &envelope.Envelope{
		SpecVersion: envelope.SpecVersion, ID: uuid.NewString(), Source: SourceREST, Type: entry.Type,
		DataContentType: envelope.ContentType, DataSchema: entry.Schema + "/" + entry.Version,
		Time: decide.Stamp(s.now()), Data: data,
	}
}

// runEnvelope is runControl for an envelope made by controlEnvelope (an
// operation that needs the correlation id before the command is queued).
func (s *Surface) runEnvelope(ctx context.Context, tenant string, entry *catalog.Entry, env *envelope.Envelope, w waitFor) (*outcome, error) {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.WaitTimeout)
	defer cancel()
	if _, err := s.cat.ResolveCommand(env); err != nil {
		return nil, err
	}
	acc, err := s.in.Enqueue(ctx, tenant, env, entry, env.Marshal())
	if err != nil {
		return nil, err
	}
	out := &outcome{corr: acc.ID, pending: project.StatusAccepted}
	r, err := s.p.Receipts.Await(wctx, tenant, acc.ID)
	if r != nil {
		out.pending = r.Status
	}
	if err != nil {
		if wctx.Err() != nil {
			return out, nil // out of time, or the caller left: the command is queued
		}
		return nil, errs.Internal(err)
	}
	if r.Status == project.StatusRejected {
		e := rejectionError(r.Rejection)
		e.Details = map[string]any{"correlationId": acc.ID}
		return nil, e
	}
	out.pending = project.StatusProcessed
	if len(r.Events) == 0 {
		return nil, errs.Internal(errors.New("processed receipt without events"))
	}
	out.seq = r.Events[0]
	if err := w.reg.WaitApplied(wctx, out.seq); err != nil {
		return out, nil
	}
	if w.agentID != "" {
		for wait := 5 * time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
			ok, err := s.p.AgentConsumers.Settled(wctx, tenant, w.agentID, out.seq, w.deleted)
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
func rejectionError(rej *project.Rejection) *errs.Error {
	if rej == nil {
		rej = &project.Rejection{}
	}
	if code := errs.Code(rej.Code); code.Known() {
		return errs.New(code, "%s", rej.Message)
	}
	return errs.New(errs.CodeInternal, "the command was rejected by a processor with an unknown code %q: %s", rej.Code, rej.Message)
}

func (s *Surface) opRegister(aggType string) func(context.Context, *Request) (*Response, error) {
	return func(ctx context.Context, r *Request) (*Response, error) {
		regs := s.p.Registries
		typ, reg := decide.TypeRegisterService, waitFor{reg: regs.Services}
		if aggType == decide.AggAgent {
			typ, reg = decide.TypeRegisterAgent, waitFor{reg: regs.Agents}
		}
		entry := s.commandEntry(typ)
		data, id, err := s.registrationBody(entry, r.Body)
		if err != nil {
			return nil, err
		}
		// Past its quota a tenant's registration is refused before it is
		// queued (the decider refuses it too, for commands that come
		// another way); an id that exists is left to the decider's
		// conflict.
		if !s.registered(r.Tenant, aggType, id) {
			if e := s.p.ControlPlane.Quotas.Exceeded(r.Tenant, aggType); e != nil {
				return nil, e
			}
		}
		w := reg
		if aggType == decide.AggAgent {
			w.agentID = id
		}
		out, err := s.runControl(ctx, r.Tenant, entry, data, w)
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
			out.pending = project.StatusProcessed
			return out.queued(), nil
		}
		return &Response{Outcome: Created, Body: body, Location: "/" + aggType + "s/" + id}, nil
	}
}

// registered reports whether tenant has aggType id registered.
func (s *Surface) registered(tenant, aggType, id string) bool {
	if aggType == decide.AggAgent {
		_, ok := s.p.Registries.Agents.Get(tenant, id)
		return ok
	}
	_, ok := s.p.Registries.Services.Get(tenant, id)
	return ok
}

// opChange submits typ (PauseAgent, ResumeAgent, DeleteAgent,
// DeleteService, DeleteSubscription or EnableSubscription) for the id and
// answers Empty once its registry, for an agent its consumer, and for a
// service the deletion of its subscriptions reflect it; Queued when that
// takes longer than registry.waitTimeout in all, or the agent's consumer
// could not be made to reflect it.
func (s *Surface) opChange(typ string) func(context.Context, *Request) (*Response, error) {
	return func(ctx context.Context, r *Request) (*Response, error) {
		id := r.Param("id")
		if err := checkID(id); err != nil {
			return nil, err
		}
		w := waitFor{reg: s.p.Registries.Agents, agentID: id, deleted: typ == decide.TypeDeleteAgent}
		switch typ {
		case decide.TypeDeleteService:
			w = waitFor{reg: s.p.Registries.Services,
				also: func(ctx context.Context) bool { return s.serviceSubscriptionsGone(ctx, r.Tenant, id) }}
		case decide.TypeDeleteSubscription, decide.TypeEnableSubscription:
			w = waitFor{reg: s.p.Registries.Subscriptions}
		}
		out, err := s.runControl(ctx, r.Tenant, s.commandEntry(typ), decide.MustJSON(map[string]string{"id": id}), w)
		if typ == decide.TypeEnableSubscription && (err == nil || errs.As(err).Code == errs.CodeSubscriptionActive) {
			// Delivery waits after a 410 until it is enabled: also when
			// the subscription never showed as disabled.
			if eerr := s.p.Webhooks.Enable(ctx, r.Tenant, id); eerr != nil {
				return nil, errs.Internal(eerr)
			}
		}
		if err != nil {
			return nil, err
		}
		if out.consumerFailed {
			// Processed, without its effect on the consumer: the trace
			// says why (and the agent's record, "failed").
			out.pending = project.StatusProcessed
		}
		if out.pending != "" {
			return out.queued(), nil
		}
		return &Response{Outcome: Empty}, nil
	}
}

// serviceSubscriptionsGone waits, until ctx ends, until this replica's
// subscriptions registry holds no subscription of tenant that carries
// service id — the subscription cascade deletes them — and reports
// whether it does.
func (s *Surface) serviceSubscriptionsGone(ctx context.Context, tenant, id string) bool {
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
		left := false
		s.p.Registries.Subscriptions.Each(tenant, func(sub decide.Subscription) bool {
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

func (s *Surface) opList(aggType string) func(context.Context, *Request) (*Response, error) {
	return func(_ context.Context, r *Request) (*Response, error) {
		limit, after, err := s.page(r)
		if err != nil {
			return nil, err
		}
		body := map[string]any{}
		var next string
		if aggType == decide.AggAgent {
			body["agents"], next = s.p.Registries.Agents.List(r.Tenant, after, limit)
		} else {
			body["services"], next = s.p.Registries.Services.List(r.Tenant, after, limit)
		}
		if next != "" {
			body["next"] = next
		}
		return &Response{Body: body}, nil
	}
}

func (s *Surface) opGet(aggType string) func(context.Context, *Request) (*Response, error) {
	return func(_ context.Context, r *Request) (*Response, error) {
		id := r.Param("id")
		if err := checkID(id); err != nil {
			return nil, err
		}
		if aggType == decide.AggAgent {
			if rec, ok := s.p.Registries.Agents.Get(r.Tenant, id); ok {
				return &Response{Body: rec}, nil
			}
			return nil, errs.New(errs.CodeAgentNotFound, "agent %q is not registered", id)
		}
		if rec, ok := s.p.Registries.Services.Get(r.Tenant, id); ok {
			return &Response{Body: rec}, nil
		}
		return nil, errs.New(errs.CodeServiceNotFound, "service %q is not registered", id)
	}
}

// bodyObject splits a request body that must be a JSON object of the
// members allowed (named, in words, by names) each given once. It returns
// the members and a violation for each repeated or unknown one, or the
// error of a body that is no JSON object.
func bodyObject(body []byte, allowed map[string]bool, names string) (map[string]json.RawMessage, []errs.Violation, error) {
	keys, dups, fields, err := envelope.SplitObject(body)
	if err != nil {
		if e := errs.As(err); e.Code == errs.CodeValidationFailed {
			return nil, nil, errs.Invalid("the request body is invalid", e.Violations)
		}
		return nil, nil, err
	}
	var v []errs.Violation
	for _, k := range dups {
		v = append(v, errs.Violation{Path: "$." + k, Message: "property appears more than once"})
	}
	for _, k := range keys {
		if !allowed[k] {
			v = append(v, errs.Violation{Path: "$." + k, Message: "unknown property (allowed: " + names + ")"})
		}
	}
	return fields, v, nil
}

// page reads a list operation's page parameters: limit (default
// PageDefault) and after (a cursor a previous page returned as next).
func (s *Surface) page(r *Request) (limit int, after string, err error) {
	limit, v := s.parseLimit(r.Param("limit"), nil)
	after = r.Param("after")
	if after != "" && !envelope.ValidTokenID(after) {
		v = append(v, errs.Violation{Path: "after", Message: "must be a cursor returned as next"})
	}
	if len(v) > 0 {
		return 0, "", errs.Invalid("invalid query parameters", v)
	}
	return limit, after, nil
}
