package mcp

import (
	"encoding/json"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// rpcCodeOf is the one table mapping error codes to JSON-RPC error codes,
// for the failures of protocol requests (resources/read,
// resources/subscribe); a tool's failure is a tool error instead
// (toolError). Bad input is invalid params, anything not found the
// resource-not-found code, a fault inside agentbus an internal error, and
// every other refusal the implementation-defined server error. The error's
// data is the error body (errs.BodyOf) REST answers.
var rpcCodeOf = map[errs.Code]int64{
	errs.CodeInvalidRequest:         jsonrpc.CodeInvalidParams,
	errs.CodeValidationFailed:       jsonrpc.CodeInvalidParams,
	errs.CodeMalformedJSON:          jsonrpc.CodeInvalidParams,
	errs.CodeUnknownCommandType:     jsonrpc.CodeInvalidParams,
	errs.CodeWebhookURLRejected:     jsonrpc.CodeInvalidParams,
	errs.CodeUnsupportedMediaType:   jsonrpc.CodeInvalidParams,
	errs.CodePayloadTooLarge:        jsonrpc.CodeInvalidParams,
	errs.CodeSchemaNotFound:         sdk.CodeResourceNotFound,
	errs.CodeRouteNotFound:          sdk.CodeResourceNotFound,
	errs.CodeAgentNotFound:          sdk.CodeResourceNotFound,
	errs.CodeServiceNotFound:        sdk.CodeResourceNotFound,
	errs.CodeTraceNotFound:          sdk.CodeResourceNotFound,
	errs.CodeSubscriptionNotFound:   sdk.CodeResourceNotFound,
	errs.CodeTenantNotFound:         sdk.CodeResourceNotFound,
	errs.CodeAggregateNotFound:      sdk.CodeResourceNotFound,
	errs.CodeMethodNotAllowed:       codeServerError,
	errs.CodeUnauthenticated:        codeServerError,
	errs.CodeForbidden:              codeServerError,
	errs.CodeQuotaExceeded:          codeServerError,
	errs.CodeSubscriptionActive:     codeServerError,
	errs.CodeAgentAlreadyRegistered: codeServerError,
	errs.CodeServiceAlreadyExists:   codeServerError,
	errs.CodeAgentAlreadyPaused:     codeServerError,
	errs.CodeAgentNotPaused:         codeServerError,
	errs.CodeAggregateExists:        codeServerError,
	errs.CodeConflict:               codeServerError,
	errs.CodeCapabilityNotSupported: codeServerError,
	errs.CodeRateLimited:            codeServerError,
	errs.CodeUnavailable:            codeServerError,
	errs.CodeInternal:               jsonrpc.CodeInternalError,
}

// codeServerError is JSON-RPC's first implementation-defined server error
// code.
const codeServerError = -32000

// RPCCodeOf returns the JSON-RPC error code of an error code (internal
// error when unknown).
func RPCCodeOf(code errs.Code) int64 {
	if c, ok := rpcCodeOf[code]; ok {
		return c
	}
	return jsonrpc.CodeInternalError
}

// edge returns err as the *errs.Error its caller sees (errs.Edge: a
// fault inside agentbus is logged once, here, its cause never shown).
func (t *Transport) edge(err error, what string) *errs.Error {
	return errs.Edge(t.log, err, "MCP request failed", "what", what)
}

// rpcError is err as a JSON-RPC error: its code from rpcCodeOf, its
// message, and the error body as data.
func (t *Transport) rpcError(err error, what string) error {
	e := t.edge(err, what)
	data, _ := json.Marshal(errs.BodyOf(e))
	return &jsonrpc.Error{Code: RPCCodeOf(e.Code), Message: string(e.Code) + ": " + e.Message, Data: data}
}

// toolError is err as a tool's failure: IsError, with the error body as
// structured content and as text.
func (t *Transport) toolError(err error, what string) *sdk.CallToolResult {
	body, _ := json.Marshal(errs.BodyOf(t.edge(err, what)))
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: string(body)}},
		StructuredContent: json.RawMessage(body)}
}
