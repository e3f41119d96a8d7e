package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/google/uuid"
)

// SourceREST is the envelope source of the commands the registry operations
// submit on a caller's behalf.
const SourceREST = "agentbus/rest"

func (a *App) pageParams() []Param {
	return []Param{
		{Name: "limit", Description: fmt.Sprintf("page size, 1 to %d (default %d)", a.cfg.PageMax, a.cfg.PageDefault)},
		{Name: "after", Description: "cursor: the next value of the previous page (the last id it held)"},
	}
}

// registryOperations are the agents, services and traces operations.
func (a *App) registryOperations() []Operation {
	post, get, del := http.MethodPost, http.MethodGet, http.MethodDelete
	const slow = " Answers 202 with the trace's Location when the outcome takes longer than registry.waitTimeout."
	return []Operation{
		{ID: "registerAgent", Capability: "agents", Method: post, Path: "/agents", Scope: ScopeWrite, HasBody: true, Success: 201,
			Summary: "Register an agent (RegisterAgent); 409 AGENT_ALREADY_REGISTERED when the id exists." + slow, Handle: a.opRegister(AggAgent)},
		{ID: "listAgents", Capability: "agents", Method: get, Path: "/agents", Scope: ScopeRead, Success: 200, Params: a.pageParams(),
			Summary: "List registered agents by id, a page at a time.", Handle: a.opList(AggAgent)},
		{ID: "getAgent", Capability: "agents", Method: get, Path: "/agents/{id}", Scope: ScopeRead, Success: 200,
			Summary: "Get an agent; 404 AGENT_NOT_FOUND.", Handle: a.opGet(AggAgent)},
		{ID: "pauseAgent", Capability: "agents", Method: post, Path: "/agents/{id}/pause", Scope: ScopeWrite, Success: 204,
			Summary: "Pause an agent (PauseAgent): its commands queue up until it is resumed; 409 AGENT_ALREADY_PAUSED." + slow, Handle: a.opChange(TypePauseAgent)},
		{ID: "resumeAgent", Capability: "agents", Method: post, Path: "/agents/{id}/resume", Scope: ScopeWrite, Success: 204,
			Summary: "Resume a paused agent (ResumeAgent): it gets the commands that queued up; 409 AGENT_NOT_PAUSED." + slow, Handle: a.opChange(TypeResumeAgent)},
		{ID: "deleteAgent", Capability: "agents", Method: del, Path: "/agents/{id}", Scope: ScopeWrite, Success: 204,
			Summary: "Delete an agent and its command consumer (DeleteAgent)." + slow, Handle: a.opChange(TypeDeleteAgent)},
		{ID: "registerService", Capability: "services", Method: post, Path: "/services", Scope: ScopeWrite, HasBody: true, Success: 201,
			Summary: "Register a service (RegisterService); 409 SERVICE_ALREADY_REGISTERED when the id exists." + slow, Handle: a.opRegister(AggService)},
		{ID: "listServices", Capability: "services", Method: get, Path: "/services", Scope: ScopeRead, Success: 200, Params: a.pageParams(),
			Summary: "List registered services by id, a page at a time.", Handle: a.opList(AggService)},
		{ID: "getService", Capability: "services", Method: get, Path: "/services/{id}", Scope: ScopeRead, Success: 200,
			Summary: "Get a service; 404 SERVICE_NOT_FOUND.", Handle: a.opGet(AggService)},
		{ID: "deleteService", Capability: "services", Method: del, Path: "/services/{id}", Scope: ScopeWrite, Success: 204,
			Summary: "Delete a service (DeleteService)." + slow, Handle: a.opChange(TypeDeleteService)},
		{ID: "getTrace", Capability: "traces", Method: get, Path: "/traces/{id}", Scope: ScopeRead, Success: 200,
			Summary: "The life of a command by its correlation id: status, events, webhook deliveries; 404 TRACE_NOT_FOUND.", Handle: a.opTrace},
	}
}

var registrationFields = map[string]bool{"id": true, "name": true, "description": true, "accepts": true, "produces": true}

// registrationBody checks a POST /agents or /services body strictly: a JSON
// object with only the registration fields, each key once, valid under the
// command's schema, and for an agent no accepted type that agentbus
// processes itself (the RegisterAgent decider rejects those too, for
// commands that come another way). It returns the command data, with a
// generated id when none was given.
func (a *App) registrationBody(entry *catalog.Entry, body []byte) ([]byte, string, error) {
	keys, dups, fields, err := envelope.SplitObject(body)
	if err != nil {
		if e := errs.As(err); e.Code == errs.CodeValidationFailed {
			return nil, "", errs.Invalid("the request body is invalid", e.Violations)
		}
		return nil, "", err
	}
	var v []errs.Violation
	for _, k := range dups {
		v = append(v, errs.Violation{Path: "$." + k, Message: "property appears more than once"})
	}
	for _, k := range keys {
		if !registrationFields[k] {
			v = append(v, errs.Violation{Path: "$." + k, Message: "unknown property (allowed: id, name, description, accepts, produces)"})
		}
	}
	for _, sv := range entry.Validate(body) {
		sv.Path = "$" + strings.TrimPrefix(sv.Path, "$.data")
		v = append(v, sv)
	}
	var accepts []string
	if entry.Type == TypeRegisterAgent && json.Unmarshal(fields["accepts"], &accepts) == nil {
		for i, t := range accepts {
			if why := a.cannotAccept(t); why != "" {
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
		fields["id"] = mustJSON(id)
	}
	return mustJSON(fields), id, nil
}

func (a *App) commandEntry(typ string) *catalog.Entry {
	vs := a.cat.CommandVersions(typ)
	return vs[len(vs)-1] // the built-in catalogue always has it
}

// idRule is what envelope.ValidTokenID accepts, as messages state it.
const idRule = "1-128 characters [A-Za-z0-9_-]"

func checkID(id string) error {
	if !envelope.ValidTokenID(id) {
		return errs.Invalid("invalid path parameter", []errs.Violation{{Path: "id", Message: "must be " + idRule}})
	}
	return nil
}

// outcome is how a control command submitted by an operation ended.
type outcome struct {
	corr    string
	pending string // status when the wait timed out; "" when done
	seq     uint64 // of the (first) event the command caused
}

// accepted202 is the answer when the outcome is not known in time.
func (o *outcome) accepted202() *Response {
	return &Response{Status: http.StatusAccepted, Body: map[string]string{"id": o.corr, "status": o.pending},
		Location: "/traces/" + o.corr}
}

// waitFor describes what must have happened, beyond the event, before an
// operation answers: its registry applied the event (read-your-writes on this
// replica) and, for agents, the agent's consumer reflects it.
type waitFor struct {
	reg     projection
	agentID string // set for agent operations
	deleted bool
}

// projection is a read model a write can wait for.
type projection interface {
	waitApplied(ctx context.Context, seq uint64) error
}

// runControl submits a control command on the caller's behalf through the
// same path as POST /commands and waits, up to registry.waitTimeout, for its
// outcome. A rejection is returned as the error it carries (so
// AGENT_NOT_FOUND is a 404); a timeout is an outcome with pending set.
func (a *App) runControl(ctx context.Context, tenant string, entry *catalog.Entry, data []byte, s waitFor) (*outcome, error) {
	wctx, cancel := context.WithTimeout(ctx, a.cfg.WaitTimeout)
	defer cancel()
	env := &envelope.Envelope{
		SpecVersion: envelope.SpecVersion, ID: uuid.NewString(), Source: SourceREST, Type: entry.Type,
		DataContentType: envelope.ContentType, DataSchema: entry.Schema + "/" + entry.Version,
		Time: a.stamp(), Data: data,
	}
	if _, err := a.cat.ResolveCommand(env); err != nil {
		return nil, err
	}
	acc, err := a.enqueue(ctx, tenant, env, entry, env.Marshal())
	if err != nil {
		return nil, err
	}
	out := &outcome{corr: acc.ID, pending: StatusAccepted}
	r, err := a.awaitReceipt(wctx, tenant, acc.ID)
	if r != nil {
		out.pending = r.Status
	}
	if err != nil {
		if wctx.Err() != nil {
			return out, nil // out of time, or the caller left: the command is queued
		}
		return nil, errs.Internal(err)
	}
	if r.Status == StatusRejected {
		e := rejectionError(r.Rejection)
		e.Details = map[string]any{"correlationId": acc.ID}
		return nil, e
	}
	out.pending = StatusProcessed
	if len(r.Events) == 0 {
		return nil, errs.Internal(errors.New("processed receipt without events"))
	}
	out.seq = r.Events[0]
	if err := s.reg.waitApplied(wctx, out.seq); err != nil {
		return out, nil
	}
	if s.agentID != "" {
		for wait := 5 * time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
			ok, err := a.agentConsumerSettled(wctx, tenant, s.agentID, out.seq, s.deleted)
			if ok {
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
	out.pending = ""
	return out, nil
}

// rejectionError is the error an operation returns for a command's
// rejection. The rejection comes from a CommandRejected event, which any
// NATS publisher can write: a code that is not one of pkg/errs (or none)
// becomes an INTERNAL_ERROR naming it.
func rejectionError(rej *Rejection) *errs.Error {
	if rej == nil {
		rej = &Rejection{}
	}
	if code := errs.Code(rej.Code); code.Known() {
		return errs.New(code, "%s", rej.Message)
	}
	return errs.New(errs.CodeInternal, "the command was rejected by a processor with an unknown code %q: %s", rej.Code, rej.Message)
}

// awaitReceipt returns the receipt of (tenant, corr) once it is terminal
// (processed or rejected). When ctx ends first it returns the last receipt
// seen, possibly nil, and ctx's error. It watches the receipt key when the
// receipts port can, and polls otherwise.
func (a *App) awaitReceipt(ctx context.Context, tenant, corr string) (*Receipt, error) {
	terminal := func(r *Receipt) bool { return r.Status == StatusProcessed || r.Status == StatusRejected }
	var last atomic.Pointer[Receipt]
	if w, ok := a.p.Receipts.(bus.KVWatcher); ok {
		done := make(chan *Receipt, 1)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err := w.Watch(wctx, receiptKey(tenant, corr), func(c bus.KVChange) {
			var r Receipt
			if c.Deleted || json.Unmarshal(c.Value, &r) != nil {
				return
			}
			last.Store(&r)
			if terminal(&r) {
				select {
				case done <- &r:
				default:
				}
			}
		})
		if err == nil {
			select {
			case r := <-done:
				return r, nil
			case <-ctx.Done():
				return last.Load(), ctx.Err()
			}
		}
		if ctx.Err() != nil {
			return last.Load(), ctx.Err()
		}
		a.log.Warn("receipt watch failed; polling", "correlationId", corr, "err", err)
	}
	for wait := 2 * time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
		r, err := a.Receipt(ctx, tenant, corr)
		switch {
		case err == nil:
			last.Store(r)
			if terminal(r) {
				return r, nil
			}
		case !errors.Is(err, errs.ErrNotFound) && ctx.Err() == nil:
			return nil, err
		}
		select {
		case <-ctx.Done():
			return last.Load(), ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (a *App) opRegister(aggType string) func(context.Context, *Request) (*Response, error) {
	typ, reg := TypeRegisterService, waitFor{reg: a.ctl.services}
	if aggType == AggAgent {
		typ, reg = TypeRegisterAgent, waitFor{reg: a.ctl.agents}
	}
	return func(ctx context.Context, r *Request) (*Response, error) {
		entry := a.commandEntry(typ)
		data, id, err := a.registrationBody(entry, r.Body)
		if err != nil {
			return nil, err
		}
		s := reg
		if aggType == AggAgent {
			s.agentID = id
		}
		out, err := a.runControl(ctx, r.Tenant, entry, data, s)
		if err != nil {
			return nil, err
		}
		if out.pending != "" {
			return out.accepted202(), nil
		}
		// The registry has applied the registration (read-your-writes).
		var body any
		var ok bool
		if aggType == AggAgent {
			body, ok = a.ctl.agents.get(r.Tenant, id)
		} else {
			body, ok = a.ctl.services.get(r.Tenant, id)
		}
		if !ok { // deleted again in the meantime: the trace tells the story
			out.pending = StatusProcessed
			return out.accepted202(), nil
		}
		return &Response{Status: http.StatusCreated, Body: body, Location: "/" + aggType + "s/" + id}, nil
	}
}

// opChange submits typ (PauseAgent, ResumeAgent, DeleteAgent or
// DeleteService) for the path's id and answers 204 once its registry, and
// for an agent its consumer, reflect it.
func (a *App) opChange(typ string) func(context.Context, *Request) (*Response, error) {
	return func(ctx context.Context, r *Request) (*Response, error) {
		id := r.Path["id"]
		if err := checkID(id); err != nil {
			return nil, err
		}
		s := waitFor{reg: a.ctl.agents, agentID: id, deleted: typ == TypeDeleteAgent}
		if typ == TypeDeleteService {
			s = waitFor{reg: a.ctl.services}
		}
		out, err := a.runControl(ctx, r.Tenant, a.commandEntry(typ), mustJSON(map[string]string{"id": id}), s)
		if err != nil {
			return nil, err
		}
		if out.pending != "" {
			return out.accepted202(), nil
		}
		return &Response{Status: http.StatusNoContent}, nil
	}
}

func (a *App) opList(aggType string) func(context.Context, *Request) (*Response, error) {
	return func(_ context.Context, r *Request) (*Response, error) {
		limit, v := a.parseLimit(first(r.Query, "limit"), nil)
		after := first(r.Query, "after")
		if after != "" && !envelope.ValidTokenID(after) {
			v = append(v, errs.Violation{Path: "after", Message: "must be a cursor returned as next"})
		}
		if len(v) > 0 {
			return nil, errs.Invalid("invalid query parameters", v)
		}
		body := map[string]any{}
		var next string
		if aggType == AggAgent {
			body["agents"], next = a.ctl.agents.list(r.Tenant, after, limit)
		} else {
			body["services"], next = a.ctl.services.list(r.Tenant, after, limit)
		}
		if next != "" {
			body["next"] = next
		}
		return &Response{Status: http.StatusOK, Body: body}, nil
	}
}

func (a *App) opGet(aggType string) func(context.Context, *Request) (*Response, error) {
	return func(_ context.Context, r *Request) (*Response, error) {
		id := r.Path["id"]
		if err := checkID(id); err != nil {
			return nil, err
		}
		if aggType == AggAgent {
			if rec, ok := a.ctl.agents.get(r.Tenant, id); ok {
				return &Response{Status: http.StatusOK, Body: rec}, nil
			}
			return nil, errs.New(errs.CodeAgentNotFound, "agent %q is not registered", id)
		}
		if rec, ok := a.ctl.services.get(r.Tenant, id); ok {
			return &Response{Status: http.StatusOK, Body: rec}, nil
		}
		return nil, errs.New(errs.CodeServiceNotFound, "service %q is not registered", id)
	}
}
