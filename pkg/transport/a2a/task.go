package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/push"
)

// traceGap is how soon after the hub hands out a command's events its
// stream reads the command's trace (for its state, and any event the
// watcher dropped).
const traceGap = 100 * time.Millisecond

// watcher follows one command: the feed (push.Feed) of its events as
// they are published, until cancel. A watcher of no command (corr "")
// receives nothing.
type watcher struct {
	corr   string
	feed   *push.Feed
	cancel func()
}

// watch watches the command a raw envelope of tenant will be (before it
// is submitted, so that no event is missed); an envelope without a usable
// id and source watches nothing (it cannot be submitted).
func (t *Transport) watch(tenant string, raw []byte) *watcher {
	corr, _ := ops.CommandCorrelation(tenant, raw)
	return t.watchID(tenant, corr)
}

// watchID watches tenant's command corr.
func (t *Transport) watchID(tenant, corr string) *watcher {
	w := &watcher{corr: corr, cancel: func() {}}
	if corr == "" {
		return w
	}
	w.feed = t.ops.FollowCommands(tenant)
	w.feed.Watch(corr)
	w.cancel = w.feed.Close
	return w
}

// follow streams tenant's command corr to yield: the task as its trace
// shows it, then each event as an artifact as the hub hands it out (and
// any the trace shows that the hub did not), and a status update per
// change of state, until the task reaches a terminal state, ctx ends or
// yield returns false, or, with an UNAUTHENTICATED error yielded, the
// caller's credential no longer holds (ops.Surface.Hold). Events are told apart by their envelope id, so
// none is sent twice. Besides the hub's events it rereads the trace every
// Config.Poll, for what no event tells (an agent taking the command).
func (t *Transport) follow(ctx context.Context, c *call, corr string, submitted bool, w *watcher, yield func(a2a.Event, error) bool) {
	sent := 0
	defer func() {
		t.log.Debug("A2A task followed", "tenant", c.tenant, "correlationId", corr, "artifacts", sent, "ended", context.Cause(ctx))
	}()
	tr, err := t.trace(ctx, c, corr, submitted)
	if err != nil {
		yield(nil, toA2A(ctx, t.log, err))
		return
	}
	task := taskOf(tr)
	seen := map[a2a.ArtifactID]bool{}
	for _, a := range task.Artifacts {
		seen[a.ID] = true
	}
	if !yield(task, nil) {
		return
	}
	state := task.Status.State
	if state.Terminal() {
		return
	}
	// emit sends an artifact not sent before, and reports whether it did.
	emit := func(a *a2a.Artifact) (bool, error) {
		if a == nil || seen[a.ID] {
			return false, nil
		}
		seen[a.ID] = true
		sent++
		if !yield(&a2a.TaskArtifactUpdateEvent{TaskID: task.ID, ContextID: task.ContextID, Artifact: a, LastChunk: true}, nil) {
			return false, errStop
		}
		return true, nil
	}
	// A stream outlives its request: it runs on ops' one loop, which ends
	// it once its credential no longer holds. The trace is read every
	// Poll, for what no event tells, and soon after the hub hands out
	// events (their command may be done), at most every traceGap: a
	// stream costs the read bounds little however many events it sees.
	err = t.ops.Follow(ctx, c.who.Credential, ops.Follower{
		Feed:     w.feed,
		Listener: ops.Listener{Tenant: c.tenant, Transport: ops.PushA2A, Label: ops.CallerLabel(c.caller())},
		Event: func(_ context.Context, ev *push.Event, _ bool) ([]*push.Event, error) {
			if !ev.Servable {
				return nil, nil
			}
			if ok, err := emit(artifactOf(ev.Data)); !ok {
				return nil, err
			}
			return []*push.Event{ev}, nil
		},
		Every: t.cfg.Poll, ReadAfter: traceGap,
		Read: func(ctx context.Context) (caught, done bool, err error) {
			tr, err := t.trace(ctx, c, corr, submitted)
			if err != nil {
				if ctx.Err() != nil || errs.CodeOf(err) == errs.CodeRateLimited || errs.CodeOf(err) == errs.CodeUnavailable {
					return true, false, nil // the next wake-up reads it again
				}
				yield(nil, toA2A(ctx, t.log, err))
				return false, false, errStop
			}
			for _, raw := range tr.Events {
				if _, err := emit(artifactOf(raw)); err != nil {
					return false, false, err
				}
			}
			if s := stateOf(tr.Status); s != state {
				state = s
				if !yield(&a2a.TaskStatusUpdateEvent{TaskID: task.ID, ContextID: task.ContextID, Status: statusOf(tr)}, nil) {
					return false, false, errStop
				}
			}
			return true, state.Terminal(), nil
		},
	})
	if err != nil && !errors.Is(err, errStop) {
		yield(nil, toA2A(ctx, t.log, err)) // the credential no longer holds
	}
}

// errStop ends a followed task whose stream is done: its reader left, or
// it was told why.
var errStop = errors.New("a2a: the task stream ended")

// trace reads the trace of c's command corr. submitted says the command
// was just accepted: its trace may not be found for a moment (between its
// processing and its receipt), and it is then shown as accepted.
//
// A command just submitted is queued whatever happens next: a trace that
// cannot be read then (not found yet, the read bounds, a stop) shows it
// accepted rather than failing the request, which a client would retry.
func (t *Transport) trace(ctx context.Context, c *call, corr string, submitted bool) (*ops.Trace, error) {
	tr, err := t.ops.CommandTrace(ctx, c.caller(), c.tenant, corr)
	if submitted && err != nil {
		if errs.CodeOf(err) != errs.CodeTraceNotFound && ctx.Err() == nil {
			t.log.Debug("a2a: a submitted command's trace could not be read; shown as accepted", "correlationId", corr, "err", err)
		}
		return &ops.Trace{ID: corr, Status: ops.StatusAccepted, Events: []json.RawMessage{}}, nil
	}
	return tr, err
}

// taskOf is the task of a command: id and context id its correlation id,
// its state from the trace's status (accepted: submitted; processing:
// working; processed: completed; rejected: failed, with the rejection's
// code and message), an artifact per event in stream order, and as
// metadata the command's type and agentbus's status.
func taskOf(tr *ops.Trace) *a2a.Task {
	t := &a2a.Task{ID: a2a.TaskID(tr.ID), ContextID: tr.ID, Status: statusOf(tr),
		Metadata: map[string]any{"commandType": tr.Command.Type, "status": tr.Status}}
	for _, raw := range tr.Events {
		if a := artifactOf(raw); a != nil {
			t.Artifacts = append(t.Artifacts, a)
		}
	}
	return t
}

func stateOf(status string) a2a.TaskState {
	switch status {
	case ops.StatusProcessed:
		return a2a.TaskStateCompleted
	case ops.StatusRejected:
		return a2a.TaskStateFailed
	case ops.StatusProcessing:
		return a2a.TaskStateWorking
	}
	return a2a.TaskStateSubmitted
}

// statusOf is the task status of a trace; a failed one carries a message
// with the rejection as text ("CODE: message") and as data ({"code",
// "message"}).
func statusOf(tr *ops.Trace) a2a.TaskStatus {
	st := a2a.TaskStatus{State: stateOf(tr.Status)}
	if !tr.UpdatedAt.IsZero() {
		at := tr.UpdatedAt
		st.Timestamp = &at
	}
	if r := tr.Rejection; r != nil && st.State == a2a.TaskStateFailed {
		m := a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart(r.Code+": "+r.Message),
			a2a.NewDataPart(map[string]any{"code": r.Code, "message": r.Message}))
		m.TaskID, m.ContextID = a2a.TaskID(tr.ID), tr.ID
		st.Message = m
	}
	return st
}

// artifactOf is the artifact of an event: id the event's id, name its
// type, one data part holding the envelope (numbers as written). nil for
// what is not an envelope with an id.
func artifactOf(raw json.RawMessage) *a2a.Artifact {
	v, err := plain(raw)
	if err != nil {
		return nil
	}
	env, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	id, _ := env["id"].(string)
	if id == "" {
		return nil
	}
	typ, _ := env["type"].(string)
	return &a2a.Artifact{ID: a2a.ArtifactID(id), Name: typ, Parts: a2a.ContentParts{a2a.NewDataPart(env)}}
}
