package mcp

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The resources: a command's story, and the catalogue's schemas.
const (
	commandPrefix       = "agentbus://commands/"
	commandSchemaPrefix = "agentbus://schemas/commands/"
	eventSchemaPrefix   = "agentbus://schemas/events/"
)

// CommandURI is the resource of the command with correlation id corr: its
// status and its events (as getTrace answers), updated as they come.
func CommandURI(corr string) string { return commandPrefix + corr }

// addResources adds the resource templates to srv.
func (s *session) addResources(srv *sdk.Server) {
	srv.AddResourceTemplate(&sdk.ResourceTemplate{Name: "command", Title: "A command's story",
		URITemplate: commandPrefix + "{correlationId}", MIMEType: "application/json",
		Description: "The command with this correlation id (what submitCommand or a typed tool returned): its status and its events, " +
			"as getTrace answers. Subscribe to be told of each event as it is published (notifications/resources/updated, the event in _meta)."},
		s.readCommand)
	srv.AddResourceTemplate(&sdk.ResourceTemplate{Name: "command-schema", Title: "A command's JSON Schema",
		URITemplate: commandSchemaPrefix + "{schema}/{version}", MIMEType: "application/schema+json",
		Description: "The JSON Schema of a command's data (listCommandCatalog lists the schemas and versions)."},
		s.readSchema(commandSchemaPrefix, "getCommandSchema"))
	srv.AddResourceTemplate(&sdk.ResourceTemplate{Name: "event-schema", Title: "An event's JSON Schema",
		URITemplate: eventSchemaPrefix + "{schema}/{version}", MIMEType: "application/schema+json",
		Description: "The JSON Schema of an event's data (listEventCatalog lists the schemas and versions)."},
		s.readSchema(eventSchemaPrefix, "getEventSchema"))
}

// segments returns the n non-empty path segments of uri after prefix, or
// false.
func segments(uri, prefix string, n int) ([]string, bool) {
	rest, ok := strings.CutPrefix(uri, prefix)
	if !ok || strings.ContainsAny(rest, "?#%") {
		return nil, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != n {
		return nil, false
	}
	for _, p := range parts {
		if p == "" {
			return nil, false
		}
	}
	return parts, true
}

// operation runs the operation id for the session, through the door.
func (s *session) operation(ctx context.Context, id string, params map[string][]string) (*ops.Response, error) {
	op, ok := s.t.ops[id]
	if !ok {
		return nil, errs.New(errs.CodeRouteNotFound, "no operation %s", id)
	}
	call, err := s.admit(op)
	if err != nil {
		return nil, err
	}
	return call.Invoke(ctx, &ops.Request{Params: params})
}

// trace returns the story of the command of a command resource uri, of
// the session's tenant (getTrace's answer): TRACE_NOT_FOUND for another
// tenant's.
func (s *session) trace(ctx context.Context, uri string) (*ops.Response, error) {
	seg, ok := segments(uri, commandPrefix, 1)
	if !ok {
		return nil, errs.New(errs.CodeTraceNotFound, "no command resource %q: it is %s{correlationId}", uri, commandPrefix)
	}
	return s.operation(ctx, "getTrace", map[string][]string{"id": {seg[0]}})
}

func (s *session) readCommand(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	res, err := s.trace(ctx, req.Params.URI)
	if err != nil {
		return nil, s.t.rpcError(err, "resources/read")
	}
	body, err := json.Marshal(res.Body)
	if err != nil {
		return nil, s.t.rpcError(errs.Internal(err), "resources/read")
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(body)}}}, nil
}

func (s *session) readSchema(prefix, op string) sdk.ResourceHandler {
	return func(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		seg, ok := segments(req.Params.URI, prefix, 2)
		if !ok {
			return nil, s.t.rpcError(errs.New(errs.CodeSchemaNotFound, "no schema resource %q: it is %s{schema}/{version}", req.Params.URI, prefix), "resources/read")
		}
		res, err := s.operation(ctx, op, map[string][]string{"schema": {seg[0]}, "version": {seg[1]}})
		if err != nil {
			return nil, s.t.rpcError(err, "resources/read")
		}
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: res.ContentType, Text: string(res.Raw)}}}, nil
	}
}

// subscribe authorises a subscription to a command's resource (the read
// scope, and the command must be the session's tenant's) and watches the
// command: each of its events from now on is pushed to the session.
// Events published before are in the resource: read it after subscribing.
func (s *session) subscribe(ctx context.Context, req *sdk.SubscribeRequest) error {
	uri := req.Params.URI
	seg, ok := segments(uri, commandPrefix, 1)
	if !ok {
		return s.t.rpcError(errs.New(errs.CodeRouteNotFound, "only command resources (%s{correlationId}) can be subscribed to", commandPrefix), "resources/subscribe")
	}
	// Watch first, then check: an event published in between is not lost.
	fresh, cancel := s.watch(seg[0])
	if _, err := s.trace(ctx, uri); err != nil {
		if fresh {
			cancel()
		}
		return s.t.rpcError(err, "resources/subscribe")
	}
	return nil
}
