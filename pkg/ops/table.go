package ops

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/secrets"
)

// Operations returns the operations table.
func (s *Surface) Operations() []Operation {
	ops := []Operation{
		{ID: "submitCommand", Capability: "commands", Scope: ScopeWrite, Outcomes: []Outcome{Queued},
			Body:   &Body{Description: "a command in the message envelope", Schema: EnvelopeSchema()},
			Output: "{id: the correlation id, status: accepted}",
			Errors: []errs.Code{errs.CodeMalformedJSON, errs.CodeUnknownCommandType, errs.CodePayloadTooLarge, errs.CodeConflict,
				errs.CodeWebhookURLRejected},
			Summary: "Submit a command in the message envelope; returns its correlation id.", Handle: s.p.Submit.Command},
		{ID: "listCommandCatalog", Capability: "commands", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Output:  "{commands: [catalogue entries]}",
			Summary: "List the command catalogue.", Handle: s.catalog.Commands},
		{ID: "getCommandSchema", Capability: "commands", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Params:      []Param{schemaParam, versionParam},
			Output:      "the command's JSON Schema document",
			ContentType: "application/schema+json", Errors: []errs.Code{errs.CodeSchemaNotFound},
			Summary: "Get a command's JSON Schema.", Handle: s.catalog.Schema(catalog.KindCommand)},
		{ID: "listEvents", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Output:  "{events: [event envelopes], next: cursor}",
			Summary: "List events in stream order, a page at a time.",
			Params: []Param{
				{Name: "type", Description: "event type to include (repeatable)", Repeated: true},
				{Name: "correlationId", Description: "only events caused by this command (the id submitCommand returned)"},
				{Name: "after", Description: "cursor: the next of the previous page (opaque), or 0 for the start of the log. Live (text/event-stream): " +
					"the stream starts after it, and without it (or Last-Event-ID) at the log's end, with new events only"},
				{Name: "limit", Description: fmt.Sprintf("page size, 1-%d, default %d; a page of large events ends at about 4 MiB", s.cfg.PageMax, s.cfg.PageDefault)},
				{Name: "view", Description: "log (the default): events; catalog: the event catalogue (listEventCatalog)", Enum: []string{"log", "catalog"}},
				{Name: "synthetic", Description: "true: list injected (synthetic) events instead of production events", Enum: []string{"true", "false"}},
			}, Handle: s.events.List, Stream: s.streamEvents},
		{ID: "listEventCatalog", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Params:  []Param{{Name: "view", Description: "catalog", Required: true, Enum: []string{"catalog"}}},
			Output:  "{events: [catalogue entries]}",
			Summary: "List the event catalogue: the event types agentbus and its processors produce.", Handle: s.catalog.Events},
		s.injectOperation(),
		{ID: "getEventSchema", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Params:      []Param{schemaParam, versionParam},
			Output:      "the event's JSON Schema document",
			ContentType: "application/schema+json", Errors: []errs.Code{errs.CodeSchemaNotFound},
			Summary: "Get an event's JSON Schema.", Handle: s.catalog.Schema(catalog.KindEvent)},
	}
	all := slices.Concat(ops, s.registryOperations(), s.subscriptionOperations(), s.deliveryOperations())
	for i := range all {
		all[i].door = s.door
	}
	return all
}

var (
	schemaParam  = Param{Name: "schema", Description: "the schema name (kebab-case)", Required: true}
	versionParam = Param{Name: "version", Description: "the schema version (<major>.<minor>)", Required: true}
	idParam      = Param{Name: "id", Description: "the id", Required: true}
)

// Event injection (POST /events) is for testing and simulation only
// (ingest.Ingest.InjectEvent): off unless Config.AllowInjection is set, and
// it needs the admin scope.
func (s *Surface) injectOperation() Operation {
	op := Operation{ID: "injectEvent", Capability: "events", Scope: ScopeAdmin, Outcomes: []Outcome{Queued},
		Body: &Body{Description: "an event in the message envelope", Schema: EnvelopeSchema()}, Output: "{id: the event id, synthetic: true}",
		Errors: []errs.Code{errs.CodeMalformedJSON, errs.CodeCapabilityNotSupported}, Handle: s.p.Submit.Inject,
		Summary: "Inject a synthetic event (testing and simulation only; needs the admin scope and operator permission)."}
	if !s.cfg.AllowInjection {
		op.Disabled = ingest.InjectionOff
	}
	return op
}

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
			Summary: "Register an agent (RegisterAgent); AGENT_ALREADY_REGISTERED when the id exists, QUOTA_EXCEEDED past the tenant's quota of agents." + slow, Handle: s.p.Registry.Register(decide.AggAgent)},
		{ID: "listAgents", Capability: "agents", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: s.pageParams(),
			Output:  "{agents: [agent records], next?: cursor}",
			Summary: "List registered agents by id, a page at a time.", Handle: s.p.Records.List(decide.AggAgent)},
		{ID: "getAgent", Capability: "agents", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: []Param{idParam},
			Output: "the agent record", Errors: notFound,
			Summary: "Get an agent; AGENT_NOT_FOUND.", Handle: s.p.Records.Get(decide.AggAgent)},
		{ID: "pauseAgent", Capability: "agents", Scope: ScopeWrite, Outcomes: changed, Params: []Param{idParam},
			Errors:  []errs.Code{errs.CodeAgentNotFound, errs.CodeAgentAlreadyPaused},
			Summary: "Pause an agent (PauseAgent): its commands queue up until it is resumed; AGENT_ALREADY_PAUSED." + slow, Handle: s.p.Registry.Change(decide.TypePauseAgent)},
		{ID: "resumeAgent", Capability: "agents", Scope: ScopeWrite, Outcomes: changed, Params: []Param{idParam},
			Errors:  []errs.Code{errs.CodeAgentNotFound, errs.CodeAgentNotPaused},
			Summary: "Resume a paused agent (ResumeAgent): it gets the commands that queued up; AGENT_NOT_PAUSED." + slow, Handle: s.p.Registry.Change(decide.TypeResumeAgent)},
		{ID: "deleteAgent", Capability: "agents", Scope: ScopeWrite, Outcomes: changed, Params: []Param{idParam}, Errors: notFound,
			Summary: "Delete an agent and its command consumer (DeleteAgent)." + slow, Handle: s.p.Registry.Change(decide.TypeDeleteAgent)},
		{ID: "registerService", Capability: "services", Scope: ScopeWrite, Body: serviceBody, Outcomes: created,
			Output: "the service record", Errors: []errs.Code{errs.CodeMalformedJSON, errs.CodeServiceAlreadyExists, errs.CodeQuotaExceeded},
			Summary: "Register a service (RegisterService); SERVICE_ALREADY_REGISTERED when the id exists, QUOTA_EXCEEDED past the tenant's quota of services." + slow, Handle: s.p.Registry.Register(decide.AggService)},
		{ID: "listServices", Capability: "services", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: s.pageParams(),
			Output:  "{services: [service records], next?: cursor}",
			Summary: "List registered services by id, a page at a time.", Handle: s.p.Records.List(decide.AggService)},
		{ID: "getService", Capability: "services", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: []Param{idParam},
			Output: "the service record", Errors: svcNotFound,
			Summary: "Get a service; SERVICE_NOT_FOUND.", Handle: s.p.Records.Get(decide.AggService)},
		{ID: "deleteService", Capability: "services", Scope: ScopeWrite, Outcomes: changed, Params: []Param{idParam}, Errors: svcNotFound,
			Summary: "Delete a service (DeleteService) and the webhook subscriptions that carry its id." + slow, Handle: s.p.Registry.Change(decide.TypeDeleteService)},
		{ID: "getTrace", Capability: "traces", Scope: ScopeRead, Outcomes: []Outcome{Done},
			Params: []Param{{Name: "id", Description: "the correlation id submitCommand returned", Required: true}},
			Output: "the trace: {id, traceId?, command, status, rejection?, events, deliveries, pushes, pushesOmitted?, updatedAt}", Errors: []errs.Code{errs.CodeTraceNotFound},
			Summary: "The life of a command by its correlation id: status, events, webhook deliveries, pushes to live listeners (kept in memory for recent commands); TRACE_NOT_FOUND.", Handle: s.events.Trace},
	}
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

// subscriptionOperations are the webhook subscription operations.
func (s *Surface) subscriptionOperations() []Operation {
	const slow = " Answers queued (202) with the trace's Location when the outcome takes longer than registry.waitTimeout."
	notFound := []errs.Code{errs.CodeSubscriptionNotFound}
	createBody := &Body{Description: "a subscription: {serviceId?, webhook: {url, secret?}, filter?: {types}}",
		Schema: s.dataSchema(decide.TypeCreateSubscription)}
	rotateBody := &Body{Description: "{secret?}: the new secret; left out, one is generated (read it with getSubscriptionSecret)", Schema: rotateBodySchema}
	return []Operation{
		{ID: "createSubscription", Capability: "events", Scope: ScopeWrite, Body: createBody, Outcomes: []Outcome{Created, Queued},
			Output: "the subscription record {id, serviceId?, webhook: {url}, filter?, status, createdAt, updatedAt}, never its secret",
			Errors: []errs.Code{errs.CodeMalformedJSON, errs.CodeWebhookURLRejected, errs.CodeServiceNotFound, errs.CodeQuotaExceeded},
			Summary: "Create a webhook subscription (CreateSubscription): the tenant's events (of filter.types) are delivered to webhook.url, signed. " +
				"No secret given, one is generated; no answer carries the secret but getSubscriptionSecret's. SERVICE_NOT_FOUND for an unknown serviceId; WEBHOOK_URL_REJECTED for a URL it may not deliver to." + slow,
			Handle: s.p.Registry.CreateSubscription},
		{ID: "listSubscriptions", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: s.pageParams(),
			Output:  "{subscriptions: [subscription records], next?: cursor}",
			Summary: "List webhook subscriptions by id, a page at a time (never their secrets).", Handle: s.p.Records.ListSubscriptions},
		{ID: "getSubscription", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: []Param{idParam},
			Output: "the subscription record", Errors: notFound,
			Summary: "Get a webhook subscription, with its status (active, failing, disabled); SUBSCRIPTION_NOT_FOUND.", Handle: s.p.Records.GetSubscription},
		{ID: "deleteSubscription", Capability: "events", Scope: ScopeWrite, Outcomes: []Outcome{Empty, Queued}, Params: []Param{idParam}, Errors: notFound,
			Summary: "Delete a webhook subscription (DeleteSubscription); its secret is erased." + slow, Handle: s.p.Registry.Change(decide.TypeDeleteSubscription)},
		{ID: "getSubscriptionSecret", Capability: "events", Scope: ScopeWrite, Outcomes: []Outcome{Done}, Params: []Param{idParam},
			Output: "{id, secret}: the current signing secret", Errors: notFound,
			Summary: "Get a subscription's current signing secret, given or generated, to verify its deliveries with (needs the write scope); " +
				"the only answer that carries a secret. SUBSCRIPTION_NOT_FOUND.",
			Handle: s.p.Records.Secret},
		{ID: "rotateSubscriptionSecret", Capability: "events", Scope: ScopeWrite, Body: rotateBody, Outcomes: []Outcome{Done, Queued},
			Params: []Param{idParam},
			Output: "{id, previousSecretValidUntil}, never the secret",
			Errors: []errs.Code{errs.CodeMalformedJSON, errs.CodeSubscriptionNotFound},
			Summary: "Replace a subscription's signing secret (RotateSubscriptionSecret); the previous one keeps signing beside it until previousSecretValidUntil " +
				"(subscriptions.rotationOverlap). No secret given, one is generated: read it with getSubscriptionSecret." + slow,
			Handle: s.p.Registry.RotateSecret},
		{ID: "enableSubscription", Capability: "events", Scope: ScopeWrite, Outcomes: []Outcome{Empty, Queued}, Params: []Param{idParam},
			Errors:  []errs.Code{errs.CodeSubscriptionNotFound, errs.CodeSubscriptionActive},
			Summary: "Enable a disabled or failing subscription again (EnableSubscription); SUBSCRIPTION_ALREADY_ACTIVE." + slow, Handle: s.p.Registry.Change(decide.TypeEnableSubscription)},
	}
}

// rotateBodySchema is the JSON Schema of rotateSubscriptionSecret's body.
var rotateBodySchema = map[string]any{
	"type": "object", "additionalProperties": false,
	"properties": map[string]any{"secret": map[string]any{
		"type": "string", "minLength": secrets.MinLen, "maxLength": secrets.MaxLen, "pattern": "^[\\x21-\\x7E]+$", "writeOnly": true,
		"description": "the new signing secret: whsec_ and the base64 of 24 to 64 bytes, or 24 to 256 other printable ASCII characters; left out, one is generated",
	}},
	"examples": []any{map[string]any{}, map[string]any{"secret": "whsec_bmV3LWV4YW1wbGUtc2VjcmV0LTI0LWJ5dGVzIQ=="}},
}

// deliveryOperations are the operations on a subscription's delivery.
func (s *Surface) deliveryOperations() []Operation {
	notFound := []errs.Code{errs.CodeSubscriptionNotFound}
	return []Operation{
		{ID: "listDeliveries", Capability: "events", Scope: ScopeRead, Outcomes: []Outcome{Done}, Params: []Param{idParam},
			Output: "{deliveries: [{subscriptionId, eventId, eventType, cursor, correlationId, status, attempts: [{at, statusCode, latencyMs, error, response}]}]}",
			Errors: notFound,
			Summary: "The deliveries of a subscription's events kept (a week): each attempt's time, status code, latency and error, " +
				"and the first KiB of the answer; status delivered, retrying or failed (dead-lettered).",
			Handle: s.p.Records.Deliveries},
		{ID: "redeliverSubscription", Capability: "events", Scope: ScopeAdmin, Outcomes: []Outcome{Queued}, Params: []Param{idParam},
			Output: "{id, deadLetters}: how many dead letters are delivered again", Errors: notFound,
			Summary: "Deliver a subscription's dead letters again, in order, before its next events (admin scope).",
			Handle:  s.p.Delivery.Redeliver},
		{ID: "replaySubscription", Capability: "events", Scope: ScopeAdmin, Outcomes: []Outcome{Queued}, Params: []Param{idParam},
			Body:   &Body{Description: "{after: a cursor, or 0} or {since: an RFC 3339 time}: where delivery goes on", Schema: replayBodySchema},
			Output: "{id, after}: delivery goes on with the first event after this cursor", Errors: append(notFound, errs.CodeMalformedJSON),
			Summary: "Move a subscription's delivery to an event (its cursor, as a delivery record or GET /events gives it; 0 for the start) or a time, back or forward (admin scope); " +
				"events delivered before are delivered again, each with the webhook-id it had (a receiver that dedupes skips what it kept).",
			Handle: s.p.Delivery.Replay},
	}
}

var replayBodySchema = map[string]any{
	"type": "object", "additionalProperties": false, "maxProperties": 1, "minProperties": 1,
	"properties": map[string]any{
		"after": map[string]any{"type": []string{"string", "integer"}, "maxLength": 64, "minimum": 0, "maximum": 0,
			"description": "the cursor of the event delivery goes on after (a delivery record's cursor, a page's next), or 0 for the start"},
		"since": map[string]any{"type": "string", "format": "date-time", "description": "delivery goes on with the first event stored at or after this time"},
	},
}
