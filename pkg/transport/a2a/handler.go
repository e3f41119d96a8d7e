package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"slices"
	"sort"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
)

// handler is agentbus's a2asrv.RequestHandler: every A2A method of every
// binding and version lands here, with the caller in the context.
type handler struct{ t *Transport }

var _ a2asrv.RequestHandler = (*handler)(nil)

// request is a decoded message: a command to submit (raw set) or another
// operation to call.
type request struct {
	op  ops.Operation
	raw []byte       // the command envelope, for a task
	in  *ops.Request // the operation's input, for any other operation
	// call is op's call as the door admitted it (begin).
	call *ops.Call
}

func (r *request) task() bool { return r.raw != nil }

// Message forms.
const (
	keySkill   = "skill"
	keyInput   = "input"
	keyData    = "data"
	keyID      = "id"
	keyVersion = "version"
)

// decode reads a message: exactly one data part, which is a command
// envelope, {"skill": <operation id>, "input": {...}} or {"skill":
// <command type>, "data": {...}, "id"?, "version"?}. Anything else is a
// VALIDATION_FAILED error naming what is wrong. The part is read as JSON
// text: the text sent over JSON-RPC and HTTP+JSON (call.part, numbers as
// written), or over gRPC the JSON of the value the SDK decoded (numbers
// are doubles there, written as encoding/json writes a float64).
func (h *handler) decode(c *call, m *a2a.Message) (*request, error) {
	bad := func(path, msg string) error {
		return errs.Invalid("the message is not a command or a skill call", []errs.Violation{{Path: path, Message: msg}})
	}
	if m == nil {
		return nil, bad("message", "is required")
	}
	var data []any
	for _, p := range m.Parts {
		if p == nil {
			continue
		}
		if d, ok := p.Content.(a2a.Data); ok {
			data = append(data, d.Value)
		}
	}
	if len(data) != 1 {
		return nil, bad("message.parts", fmt.Sprintf("must hold exactly one data part (a command envelope, {\"skill\", \"input\"} or {\"skill\", \"data\"}); it holds %d", len(data)))
	}
	raw, err := partText(c.part, data[0])
	if err != nil {
		return nil, bad("message.parts.data", "cannot be encoded as JSON")
	}
	keys, _, obj, err := envelope.SplitObject(raw)
	if err != nil {
		return nil, bad("message.parts.data", "must be a JSON object")
	}
	submit := h.t.table["submitCommand"]
	skill, named := obj[keySkill]
	if !named {
		return &request{op: submit, raw: raw}, nil
	}
	var id string
	if json.Unmarshal(skill, &id) != nil || !isString(skill) {
		return nil, bad("message.parts.data.skill", "must be a string: an operation id or a command type")
	}
	if op, ok := h.t.table[id]; ok {
		if err := onlyKeys(keys, keySkill, keyInput); err != nil {
			return nil, err
		}
		in := obj[keyInput]
		if t := bytes.TrimSpace(in); len(t) > 0 && t[0] != '{' && !bytes.Equal(t, []byte("null")) {
			return nil, bad("message.parts.data.input", "must be a JSON object")
		}
		r, err := op.DecodeInput(in, "message.parts.data.input")
		if err != nil {
			return nil, err
		}
		r.Tenant, r.Caller = c.tenant, c.caller()
		if op.ID == submit.ID {
			return &request{op: op, raw: r.Body}, nil
		}
		return &request{op: op, in: r}, nil
	}
	if err := onlyKeys(keys, keySkill, keyData, keyID, keyVersion); err != nil {
		return nil, err
	}
	tc := ops.TypedCommand{Type: id, Source: ops.CallerSource(c.caller()), Data: obj[keyData]}
	for key, dst := range map[string]*string{keyID: &tc.ID, keyVersion: &tc.Version} {
		if v, given := obj[key]; given {
			if json.Unmarshal(v, dst) != nil || !isString(v) || *dst == "" {
				return nil, bad("message.parts.data."+key, "must be a non-empty string")
			}
		}
	}
	prep, err := h.t.ops.PrepareTyped(c.tenant, tc)
	if err != nil {
		if errs.CodeOf(err) == errs.CodeUnknownCommandType {
			return nil, errs.Invalid("unknown skill", []errs.Violation{{Path: "message.parts.data.skill",
				Message: "is neither an operation id nor a command type of the catalogue (the agent card lists the skills)"}})
		}
		return nil, err
	}
	return &request{op: submit, raw: prep.Body}, nil
}

// partText returns the JSON text of a message's data part whose value the
// SDK decoded as v: sent, the text as sent, when it is that value (the
// body readChecked read holds one data part, the one the SDK found);
// otherwise v encoded.
func partText(sent json.RawMessage, v any) ([]byte, error) {
	enc, err := json.Marshal(v)
	if err != nil || sent == nil {
		return enc, err
	}
	var again any
	if json.Unmarshal(sent, &again) != nil {
		return enc, nil
	}
	if b, err := json.Marshal(again); err == nil && bytes.Equal(b, enc) {
		return sent, nil
	}
	return enc, nil
}

// isString reports whether raw is a JSON string.
func isString(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '"'
}

// onlyKeys refuses an object with members other than those named.
func onlyKeys(keys []string, names ...string) error {
	var v []errs.Violation
	for _, k := range keys {
		if !slices.Contains(names, k) {
			v = append(v, errs.Violation{Path: "message.parts.data." + errs.Clip(k), Message: "is not a member of this skill's data part"})
		}
	}
	if len(v) > 0 {
		sort.Slice(v, func(i, j int) bool { return v[i].Path < v[j].Path })
		return errs.Invalid("the message is not a command or a skill call", v)
	}
	return nil
}

// SendMessage submits a command and answers its task, once the command's
// outcome is known or Config.WaitTimeout has passed (at once with
// returnImmediately); or calls another operation and answers its result
// as a message.
func (h *handler) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	c, r, err := h.begin(ctx, req)
	if err != nil {
		return nil, err
	}
	if !r.task() {
		return h.runSkill(ctx, c, r, req.Message)
	}
	w := h.t.watch(c.tenant, r.raw)
	defer func() { w.cancel() }()
	corr, w, err := h.submit(ctx, c, r, w)
	if err != nil {
		return nil, err
	}
	if req.Config == nil || !req.Config.ReturnImmediately {
		wctx, cancel := context.WithTimeout(ctx, h.t.cfg.WaitTimeout)
		h.t.follow(wctx, c, corr, true, w, func(a2a.Event, error) bool { return true })
		cancel()
	}
	// Queued: the answer is its task, read on a context a stop does not
	// end (briefly), whatever the request's has come to.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceGap*20)
	defer cancel()
	tr, _ := h.t.trace(rctx, c, corr, true) // never fails for a submitted command
	return taskOf(tr), nil
}

// SendStreamingMessage submits a command and streams its task: the task
// as it stands, then an artifact per event as it is published and a
// status update per change of state, up to its outcome. A stream takes one
// of the caller's live streams (ops.Call.Slot; RATE_LIMITED,
// before anything is queued, when none is left). Another operation streams
// its result as one message.
func (h *handler) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		c, r, err := h.begin(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		if !r.task() {
			yield(h.runSkill(ctx, c, r, req.Message))
			return
		}
		leave, err := r.call.Slot()
		if err != nil { // refused before the command is queued
			yield(nil, toA2A(ctx, h.t.log, err))
			return
		}
		defer leave()
		w := h.t.watch(c.tenant, r.raw)
		defer func() { w.cancel() }()
		corr, w, err := h.submit(ctx, c, r, w)
		if err != nil {
			yield(nil, err)
			return
		}
		h.t.follow(ctx, c, corr, true, w, yield)
	}
}

// begin checks a message request and decodes its message.
func (h *handler) begin(ctx context.Context, req *a2a.SendMessageRequest) (*call, *request, error) {
	c, err := callOf(ctx)
	if err != nil {
		return nil, nil, toA2A(ctx, h.t.log, err)
	}
	if req == nil {
		return nil, nil, toA2A(ctx, h.t.log, errs.Invalid("the request has no message", nil))
	}
	r, err := h.decode(c, req.Message)
	if err == nil && r.task() && req.Message.TaskID != "" && !sameTask(req.Message.TaskID, c.tenant, r.raw) {
		err = errs.Invalid("the message names another task", []errs.Violation{{Path: "message.taskId",
			Message: "a command starts its own task, whose id is the command's correlation id: omit taskId"}})
	}
	if err != nil {
		return nil, nil, toA2A(ctx, h.t.log, err)
	}
	if r.call, err = c.admit(r.op); err != nil {
		return nil, nil, toA2A(ctx, h.t.log, err)
	}
	return c, r, nil
}

// submit submits a command as submitCommand does, watched by w (made
// from its envelope before). It returns the command's correlation id and
// the watcher that follows it: w, or, should ingest have given the command
// another id than its envelope says, a watcher of that id (w cancelled).
func (h *handler) submit(ctx context.Context, c *call, r *request, w *watcher) (string, *watcher, error) {
	res, err := r.call.Invoke(ctx, &ops.Request{Body: r.raw})
	if err != nil {
		return "", w, toA2A(ctx, h.t.log, err)
	}
	acc, ok := res.Body.(*ops.Submitted)
	if !ok {
		return "", w, toA2A(ctx, h.t.log, errs.Internal(fmt.Errorf("submitCommand answered %T", res.Body)))
	}
	if acc.ID != w.corr {
		w.cancel()
		w = h.t.watchID(c.tenant, acc.ID)
	}
	return acc.ID, w, nil
}

// runSkill calls an operation other than submitCommand and answers its
// result: a message whose data part is {"outcome", "result"} and, when
// the operation names one, "location" (an absolute URL).
func (h *handler) runSkill(ctx context.Context, c *call, r *request, m *a2a.Message) (*a2a.Message, error) {
	res, err := r.call.Invoke(ctx, r.in)
	if err != nil {
		return nil, toA2A(ctx, h.t.log, err)
	}
	out := map[string]any{"outcome": outcomeName(res.Outcome)}
	switch {
	case res.Raw != nil:
		v, err := plain(res.Raw)
		if err != nil {
			return nil, toA2A(ctx, h.t.log, errs.Internal(err))
		}
		out["result"] = v
	case res.Body != nil:
		b, err := json.Marshal(res.Body)
		if err != nil {
			return nil, toA2A(ctx, h.t.log, errs.Internal(err))
		}
		v, err := plain(b)
		if err != nil {
			return nil, toA2A(ctx, h.t.log, errs.Internal(err))
		}
		out["result"] = v
	}
	if res.Location != "" {
		out["location"] = h.t.Base(c.tenant) + res.Location
	}
	msg := a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewDataPart(out))
	if m != nil {
		msg.ContextID = m.ContextID
	}
	return msg, nil
}

func outcomeName(o ops.Outcome) string {
	switch o {
	case ops.Created:
		return "created"
	case ops.Queued:
		return "queued"
	case ops.Empty:
		return "empty"
	}
	return "done"
}

// plain decodes JSON into maps, slices and primitives, numbers kept as
// written (json.Number).
func plain(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// GetTask returns the task of a command, built from its trace. Needs the
// read scope.
func (h *handler) GetTask(ctx context.Context, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	c, _, err := h.reader(ctx)
	if err != nil {
		return nil, err
	}
	if req == nil || req.ID == "" {
		return nil, toA2A(ctx, h.t.log, errs.Invalid("invalid task id", []errs.Violation{{Path: "id", Message: "is required"}}))
	}
	tr, err := h.t.ops.CommandTrace(ctx, c.caller(), c.tenant, string(req.ID))
	if err != nil {
		return nil, toA2A(ctx, h.t.log, err)
	}
	return taskOf(tr), nil
}

// reader returns the caller, who must have the read scope, and the call
// of getTrace the door admitted for it.
func (h *handler) reader(ctx context.Context) (*call, *ops.Call, error) {
	c, err := callOf(ctx)
	var read *ops.Call
	if err == nil {
		read, err = c.admit(h.t.table["getTrace"])
	}
	if err != nil {
		return nil, nil, toA2A(ctx, h.t.log, err)
	}
	return c, read, nil
}

// SubscribeToTask streams a task as SendStreamingMessage does, from the
// task as it stands: on any replica, after any restart.
func (h *handler) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		c, read, err := h.reader(ctx)
		if err != nil {
			yield(nil, err)
			return
		}
		if req == nil || req.ID == "" {
			yield(nil, toA2A(ctx, h.t.log, errs.Invalid("invalid task id", []errs.Violation{{Path: "id", Message: "is required"}})))
			return
		}
		leave, err := read.Slot()
		if err != nil {
			yield(nil, toA2A(ctx, h.t.log, err))
			return
		}
		defer leave()
		w := h.t.watchID(c.tenant, string(req.ID))
		defer w.cancel()
		h.t.follow(ctx, c, string(req.ID), false, w, yield)
	}
}

// CancelTask refuses: a command once queued runs to its outcome.
func (h *handler) CancelTask(ctx context.Context, req *a2a.CancelTaskRequest) (*a2a.Task, error) {
	task, err := h.GetTask(ctx, &a2a.GetTaskRequest{ID: req.ID})
	if err != nil {
		return nil, err
	}
	return nil, a2a.NewError(a2a.ErrTaskNotCancelable, fmt.Sprintf("task %s is a command, which runs to its outcome once queued", task.ID))
}

// ListTasks is not offered: a command's task is found by its id.
func (h *handler) ListTasks(ctx context.Context, _ *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	if _, _, err := h.reader(ctx); err != nil {
		return nil, err
	}
	return nil, a2a.NewError(a2a.ErrUnsupportedOperation, "tasks are not listed; the listEvents and getTrace skills read the commands' outcomes")
}

// The push notification methods are not offered (the card says
// pushNotifications: false); webhook subscriptions deliver events.
func (h *handler) GetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) ListTaskPushConfigs(context.Context, *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) CreateTaskPushConfig(context.Context, *a2a.PushConfig) (*a2a.PushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) DeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigRequest) error {
	return a2a.ErrPushNotificationNotSupported
}

// GetExtendedAgentCard is not offered: the public card says everything.
func (h *handler) GetExtendedAgentCard(context.Context, *a2a.GetExtendedAgentCardRequest) (*a2a.AgentCard, error) {
	return nil, a2a.ErrExtendedCardNotConfigured
}

// sameTask reports whether id is the task of the command envelope raw of
// tenant (its correlation id).
func sameTask(id a2a.TaskID, tenant string, raw []byte) bool {
	corr, _ := ops.CommandCorrelation(tenant, raw)
	return string(id) == corr
}
