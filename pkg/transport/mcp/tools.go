package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// tool is one tool: an operation of the table, or the typed tool of a
// command type.
type tool struct {
	def *sdk.Tool
	op  ops.Operation // the operation; submitCommand for a typed tool
	// typ is the command type of a typed tool; "" for an operation's.
	typ string
	// sig is def as JSON: a tool whose sig changes is offered anew.
	sig string
}

// submitOp is the operation typed tools submit through.
const submitOp = "submitCommand"

// MetaCommandID is the _meta key of a typed tool call that sets the
// command's envelope id (a string); without it the id is a fresh UUID.
// Calling again with the same id is the same command: its correlation id
// comes back and nothing is queued twice.
const MetaCommandID = "agentbus/commandId"

// buildTools returns a tool per operation of table the configuration
// leaves on and a typed tool per entry of typed (the newest of each typed
// command type). It fails for a typed command whose schema is not an
// object schema, whose tool name is taken, or that the SDK refuses as a
// tool.
func buildTools(table []ops.Operation, typed []*catalog.Entry) ([]tool, error) {
	var out []tool
	var submit *ops.Operation
	for _, op := range table {
		if op.Disabled != "" {
			continue // switched off by configuration: not offered
		}
		if op.ID == submitOp {
			submit = &op
		}
		desc := op.Summary
		if op.Output != "" {
			desc += " Returns " + op.Output + "."
		}
		desc += fmt.Sprintf(" Needs the %s scope.", op.Scope)
		out = append(out, tool{op: op, def: &sdk.Tool{Name: op.ID, Description: desc, InputSchema: op.InputSchema(),
			Annotations: &sdk.ToolAnnotations{ReadOnlyHint: op.Scope == ops.ScopeRead}}})
	}
	if submit == nil {
		return nil, fmt.Errorf("the operations table has no %s", submitOp)
	}
	taken := map[string]bool{}
	for _, tl := range out {
		taken[tl.def.Name] = true
	}
	for _, e := range typed {
		var schema map[string]any
		if err := json.Unmarshal(e.Doc, &schema); err != nil || schema["type"] != "object" {
			return nil, fmt.Errorf("command %s/%s: its schema is not an object schema, which an MCP tool's input must be", e.Schema, e.Version)
		}
		name := ops.SnakeCase(e.Type)
		if taken[name] {
			return nil, fmt.Errorf("command %s: its tool name %s is taken", e.Type, name)
		}
		taken[name] = true
		delete(schema, "$schema") // the tool's input schema is JSON Schema 2020-12 by default
		desc := strings.TrimSpace(e.Description)
		if desc != "" && !strings.HasSuffix(desc, ".") {
			desc += "."
		}
		desc += fmt.Sprintf(" Submits a %s command (schema %s/%s): the arguments are its data; agentbus completes the envelope "+
			"(_meta %q sets its id) and returns {id: the correlation id, status: accepted}. Its events are pushed to this "+
			"session; agentbus://commands/{id} is its story. Needs the %s scope.", e.Type, e.Schema, e.Version, MetaCommandID, submit.Scope)
		tl := tool{op: *submit, typ: e.Type, def: &sdk.Tool{Name: name, Title: e.Type, Description: strings.TrimSpace(desc),
			InputSchema: schema}}
		if err := trial(tl); err != nil {
			return nil, fmt.Errorf("command %s/%s: %w", e.Schema, e.Version, err)
		}
		out = append(out, tl)
	}
	for i := range out {
		sig, err := json.Marshal(out[i].def)
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", out[i].def.Name, err)
		}
		out[i].sig = string(sig)
	}
	return out, nil
}

// trial adds tl to a server of its own: the SDK panics on a tool it
// refuses (an x-mcp-header it does not take, say), which must not happen
// on a session's server.
func trial(tl tool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("not a valid MCP tool: %v", r)
		}
	}()
	sdk.NewServer(&sdk.Implementation{Name: "trial", Version: "0"}, nil).AddTool(tl.def,
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return nil, nil })
	return nil
}

// CheckCatalog reports whether the typed tools of next can be built (see
// buildTools): a catalogue reload is refused when they cannot.
func (t *Transport) CheckCatalog(next *catalog.Snapshot) error {
	_, err := buildTools(t.table, next.TypedCommands())
	return err
}

// CatalogChanged rebuilds the typed tools from the catalogue as it is now
// and brings every open session's tools up to date: the SDK tells each
// session notifications/tools/list_changed. On an error (see buildTools)
// the tools stay as they were.
func (t *Transport) CatalogChanged() error {
	tools, err := buildTools(t.table, t.surface.TypedCommands())
	if err != nil {
		return err
	}
	for _, s := range t.openSessions(func() { t.tools = tools }) {
		s.syncTools()
	}
	return nil
}

// currentTools returns the tools every session offers now.
func (t *Transport) currentTools() []tool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tools
}

// syncTools makes the session's server offer the transport's current
// tools: it removes those gone and adds those new or changed. It does
// nothing before the session starts (start syncs it) or after it ends.
func (s *session) syncTools() {
	want := s.t.currentTools()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil || s.ended {
		return
	}
	keep := make(map[string]tool, len(want))
	for _, tl := range want {
		keep[tl.def.Name] = tl
	}
	var gone []string
	for name := range s.tools {
		if _, ok := keep[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		s.srv.RemoveTools(gone...)
	}
	for name, tl := range keep {
		if have, ok := s.tools[name]; !ok || have.sig != tl.sig {
			s.srv.AddTool(tl.def, s.callTool(tl))
		}
	}
	s.tools = keep
}

// callTool returns the handler of tl in session s. A failure is a tool
// error (IsError) carrying the error body REST answers; it changes
// nothing.
func (s *session) callTool(tl tool) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		res, err := s.invoke(ctx, tl, req.Params)
		if err != nil {
			return s.t.toolError(err, tl.def.Name), nil
		}
		return result(res), nil
	}
}

// invoke runs one tool call.
func (s *session) invoke(ctx context.Context, tl tool, p *sdk.CallToolParamsRaw) (*ops.Response, error) {
	op := tl.op
	call, err := s.admit(op)
	if err != nil {
		return nil, err
	}
	r := &ops.Request{Params: map[string][]string{}}
	corr := "" // the correlation id a command will have
	if tl.typ != "" {
		id, err := metaCommandID(p.Meta)
		if err != nil {
			return nil, err
		}
		data := p.Arguments
		if len(bytes.TrimSpace(data)) == 0 {
			data = json.RawMessage("{}")
		}
		prep, err := s.t.surface.PrepareTyped(s.tenant, ops.TypedCommand{Type: tl.typ, Data: data, ID: id, Source: s.source()})
		if err != nil {
			return nil, err
		}
		r.Body, corr = prep.Body, prep.CorrelationID
	} else {
		in, err := op.DecodeInput(p.Arguments, "$")
		if err != nil {
			return nil, err
		}
		r.Params, r.Body = in.Params, in.Body
		if op.ID == submitOp {
			corr, _ = ops.CommandCorrelation(s.tenant, r.Body)
		}
	}
	if op.ID != submitOp {
		return call.Invoke(ctx, r)
	}
	// The watch begins before the command is stored, so that none of
	// its events is missed.
	if corr != "" {
		if fresh, cancel := s.watch(corr); fresh {
			res, err := call.Invoke(ctx, r)
			if err != nil {
				cancel()
			}
			return res, err
		}
	}
	return call.Invoke(ctx, r)
}

// source is the envelope source of the typed commands of the session: its
// caller's identity.
func (s *session) source() string { return ops.CallerSource(s.caller) }

// metaCommandID returns the command id a typed tool call's _meta sets, or
// "".
func metaCommandID(m sdk.Meta) (string, error) {
	v, ok := m[MetaCommandID]
	if !ok {
		return "", nil
	}
	id, ok := v.(string)
	if !ok || id == "" {
		return "", errs.Invalid("invalid _meta", []errs.Violation{{Path: "_meta." + MetaCommandID, Message: "must be a non-empty string"}})
	}
	return id, nil
}

// result is a tool's answer: the operation's result as JSON text and, when
// it is an object (every result but an empty one is), as structured
// content too; an empty result is {"status":"done"}.
func result(res *ops.Response) *sdk.CallToolResult {
	var body []byte
	switch {
	case res.Raw != nil:
		body = res.Raw
	case res.Body != nil:
		body, _ = json.Marshal(res.Body)
	default:
		body = []byte(`{"status":"done"}`)
	}
	out := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(body)}}}
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '{' {
		out.StructuredContent = json.RawMessage(body)
	}
	return out
}
