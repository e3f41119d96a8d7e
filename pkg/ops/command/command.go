// Package command is the command side of the operations table (pkg/ops):
// the handlers that change something — submitting commands and injecting
// events, the registry writes (agents, services, subscriptions and their
// secrets) and the actions on a subscription's delivery. Each handler
// holds only what it uses.
package command

import (
	"context"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/ops/op"
	"github.com/agentbus/agentbus/pkg/projection"
)

// Submit submits commands and injects events through the ingest. Safe
// for concurrent use.
type Submit struct {
	cat *catalog.Catalog
	in  *ingest.Ingest
	now func() time.Time
}

// NewSubmit returns the submissions of cat's commands through in.
func NewSubmit(cat *catalog.Catalog, in *ingest.Ingest) *Submit {
	return &Submit{cat: cat, in: in, now: time.Now}
}

// Submitted is the Body of submitCommand's answer.
type Submitted struct {
	// ID is the command's correlation id: its trace's, its events'.
	ID     string `json:"id"`
	Status string `json:"status"` // StatusAccepted
}

// Command is submitCommand.
func (s *Submit) Command(ctx context.Context, r *op.Request) (*op.Response, error) {
	acc, err := s.submitAs(ctx, r.Caller, r.Tenant, r.Body)
	if err != nil {
		return nil, err
	}
	return &op.Response{Outcome: op.Queued, Body: &Submitted{ID: acc.ID, Status: projection.StatusAccepted},
		Location: "/traces/" + acc.ID}, nil
}

// Inject is injectEvent (ingest.Ingest.InjectEvent).
func (s *Submit) Inject(ctx context.Context, r *op.Request) (*op.Response, error) {
	id, err := s.in.InjectEvent(ctx, r.Tenant, r.Body)
	if err != nil {
		return nil, err
	}
	return &op.Response{Outcome: op.Queued, Body: map[string]any{"id": id, "synthetic": true}}, nil
}

// CallerSource is the envelope source of the commands a caller submits by
// type, over any transport: its credential id ("anonymous" for none),
// under "agentbus/caller/". The same caller and id are the same command
// over MCP and A2A alike.
func CallerSource(caller string) string {
	if caller == "" {
		caller = "anonymous"
	}
	return callerSourcePrefix + caller
}

// callerSourcePrefix begins every CallerSource.
const callerSourcePrefix = "agentbus/caller/"

// submitAs submits a command envelope of tenant for caller, as
// submitCommand does (ingest.Ingest.SubmitCommand, its checks and errors),
// refusing (VALIDATION_FAILED at $.source) a source that is another
// caller's CallerSource: the source of typed commands is the caller's
// identity, and no one may take another caller's typed command ids first.
// The envelope is checked first (its errors come before that one).
func (s *Submit) submitAs(ctx context.Context, caller, tenant string, body []byte) (*ingest.Accepted, error) {
	return s.in.SubmitChecked(ctx, tenant, body, func(env *envelope.Envelope) error {
		if strings.HasPrefix(env.Source, callerSourcePrefix) && env.Source != CallerSource(caller) {
			return errs.Invalid("the command's source is reserved", []errs.Violation{{Path: "$.source",
				Message: "sources under " + callerSourcePrefix + " name the credential that submits a typed command; this one is another's"}})
		}
		return nil
	})
}

// Builtin queues a built-in command of tenant that agentbus's own
// components send (webhook delivery's DisableSubscription, say): typ at
// its catalogue's latest version, data its data, with source and id as
// given, so that the same source and id again are the same command (its
// receipt answers, nothing is queued twice). It goes the way POST
// /commands goes once a command is checked. data must be valid under the
// type's schema. Errors: the catalogue's for a type or data it does not
// take, else those of the ingest (CONFLICT, PAYLOAD_TOO_LARGE, internal).
// Safe for concurrent use.
func (s *Submit) Builtin(ctx context.Context, tenant, source, id, typ string, data any) error {
	entry := latest(s.cat, typ)
	env := &envelope.Envelope{
		SpecVersion: envelope.SpecVersion, ID: id, Source: source, Type: typ, DataContentType: envelope.ContentType,
		DataSchema: entry.Schema + "/" + entry.Version, Time: decide.Stamp(s.now()), Data: decide.MustJSON(data),
	}
	if _, err := s.cat.ResolveCommand(env); err != nil {
		return err
	}
	_, err := s.in.Enqueue(ctx, tenant, env, entry, env.Marshal())
	return err
}

// latest is the catalogue entry of the latest version of a built-in
// command type.
func latest(cat *catalog.Catalog, typ string) *catalog.Entry {
	vs := cat.CommandVersions(typ)
	return vs[len(vs)-1] // the built-in catalogue always has it
}
