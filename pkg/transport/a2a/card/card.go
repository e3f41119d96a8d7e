// Package card builds agentbus's A2A agent card from the operations
// table and the catalogue: the interfaces of both protocol versions, a
// skill per operation and per command type with their input schemas, the
// security schemes of the configured authentication, and the card's JSON
// as both A2A 1.0 and 0.3 readers take it. It serves nothing: the A2A
// transport serves what it builds.
package card

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/ops"
)

// SkillSchemasExtension is the URI of the card extension whose params
// hold each skill's input schema by skill id ({"schemas": {id: schema}}):
// an A2A skill has no field of its own for it.
const SkillSchemasExtension = "urn:agentbus:a2a:skill-input-schemas:v1"

// Security scheme names on the card.
const (
	schemeBearer = "bearer"
	schemeOAuth2 = "oauth2"
	schemeAPIKey = "apiKey"
)

// Config describes what the card says of agentbus.
type Config struct {
	// Name, Description and Version describe agentbus.
	Name, Description, Version string
	// Endpoint is the public base URL: the interface URLs are absolute on
	// it (under /{tenantId} in multi-tenant mode).
	Endpoint    string
	MultiTenant bool
	// JSONRPC, REST, JSONRPCV03 and RESTV03 are the paths of the A2A 1.0
	// and 0.3 interfaces, relative to a tenant's base.
	JSONRPC, REST, JSONRPCV03, RESTV03 string
	// TokenURL is the token endpoint of the bearer method (the OAuth2
	// scheme's).
	TokenURL string
	// GRPC lists the gRPC interfaces, at the endpoint's host:port.
	GRPC bool
}

// Surface is what the card reads of the operations; *ops.Surface
// implements it.
type Surface interface {
	// Operations returns the operations table.
	Operations() []ops.Operation
	// CommandEntries returns the command types, each with its versions
	// oldest first; SchemaURL the absolute URL of an entry's schema.
	CommandEntries() [][]*catalog.Entry
	SchemaURL(tenant string, kind catalog.Kind, e *catalog.Entry) string
}

var _ Surface = (*ops.Surface)(nil)

// Auth says how credentials are sent; *auth.Guard implements it.
type Auth interface {
	// Enabled reports whether callers must present credentials.
	Enabled() bool
	// Method and Scheme say how credentials are sent.
	Method() auth.Method
	Scheme() string
}

var _ Auth = (*auth.Guard)(nil)

// Cards builds the card of each tenant. Safe for concurrent use.
type Cards struct {
	cfg  Config
	ops  Surface
	auth Auth
}

// New returns the cards of the operations of s, with a's security.
func New(cfg Config, s Surface, a Auth) *Cards {
	return &Cards{cfg: cfg, ops: s, auth: a}
}

// Base returns the public base URL of tenant's routes.
func (t *Cards) Base(tenant string) string {
	if t.cfg.MultiTenant {
		return t.cfg.Endpoint + "/" + tenant
	}
	return t.cfg.Endpoint
}

// Card returns the agent card of tenant: both protocol versions'
// interfaces (JSON-RPC first, then HTTP+JSON) at absolute URLs on the
// endpoint, then the gRPC ones when served (grpcInterfaces); a skill per
// operation and per command type with their input schemas
// (SkillSchemasExtension), the configured security schemes, and
// streaming without push notifications.
func (t *Cards) Card(tenant string) *a2a.AgentCard {
	base := t.Base(tenant)
	v03 := func(url string, b a2a.TransportProtocol) *a2a.AgentInterface {
		return &a2a.AgentInterface{URL: url, ProtocolBinding: b, ProtocolVersion: a2av0.Version}
	}
	skills, schemas := t.skills(tenant)
	card := &a2a.AgentCard{
		Name: t.cfg.Name, Description: t.cfg.Description, Version: t.cfg.Version,
		SupportedInterfaces: []*a2a.AgentInterface{
			a2a.NewAgentInterface(base+t.cfg.JSONRPC, a2a.TransportProtocolJSONRPC),
			a2a.NewAgentInterface(base+t.cfg.REST, a2a.TransportProtocolHTTPJSON),
			v03(base+t.cfg.JSONRPCV03, a2a.TransportProtocolJSONRPC),
			v03(base+t.cfg.RESTV03, a2a.TransportProtocolHTTPJSON),
		},
		Capabilities: a2a.AgentCapabilities{Streaming: true, PushNotifications: false, Extensions: []a2a.AgentExtension{{
			URI:         SkillSchemasExtension,
			Description: "The JSON Schema of the data part of a message to each skill, by skill id: {\"skill\", \"input\"} for an operation, {\"skill\", \"data\"} for a command type, or a command envelope.",
			Params:      map[string]any{"schemas": schemas},
		}}},
		DefaultInputModes:  []string{"application/json"},
		DefaultOutputModes: []string{"application/json"},
		Skills:             skills,
	}
	card.SupportedInterfaces = append(card.SupportedInterfaces, t.grpcInterfaces(tenant)...)
	card.SecuritySchemes, card.SecurityRequirements = t.security("")
	return card
}

// grpcInterfaces returns the card's gRPC interfaces when they are served:
// A2A 1.0's, naming the tenant in multi-tenant mode (the SDK's client puts
// it in each request's tenant field), and in single-tenant mode A2A 0.3's
// (a 0.3 interface cannot name a tenant).
func (t *Cards) grpcInterfaces(tenant string) []*a2a.AgentInterface {
	target := grpcTarget(t.cfg.Endpoint)
	if !t.cfg.GRPC || target == "" {
		return nil
	}
	v1 := a2a.NewAgentInterface(target, a2a.TransportProtocolGRPC)
	if !t.cfg.MultiTenant {
		return []*a2a.AgentInterface{v1, {URL: target, ProtocolBinding: a2a.TransportProtocolGRPC, ProtocolVersion: a2av0.Version}}
	}
	v1.Tenant = tenant
	return []*a2a.AgentInterface{v1}
}

// security returns the card's security schemes and the requirements of a
// skill needing scope ("" for the card's own).
func (t *Cards) security(scope ops.Scope) (a2a.NamedSecuritySchemes, a2a.SecurityRequirementsOptions) {
	if !t.auth.Enabled() {
		return nil, nil
	}
	scopes := a2a.SecuritySchemeScopes{}
	if scope != "" {
		scopes = a2a.SecuritySchemeScopes{string(scope)}
	}
	switch t.auth.Method() {
	case auth.MethodBearer:
		return a2a.NamedSecuritySchemes{
				schemeBearer: a2a.HTTPAuthSecurityScheme{Scheme: "Bearer",
					Description: "An access token from the token endpoint, or an API key (ab_<id>_<secret>)."},
				schemeOAuth2: a2a.OAuth2SecurityScheme{Flows: a2a.ClientCredentialsOAuthFlow{TokenURL: t.cfg.TokenURL, Scopes: auth.ScopeDescriptions}},
			}, a2a.SecurityRequirementsOptions{
				{schemeBearer: a2a.SecuritySchemeScopes{}},
				{schemeOAuth2: scopes},
			}
	case auth.MethodAPIKeyHeader, auth.MethodAPIKeyQuery:
		loc := a2a.APIKeySecuritySchemeLocationHeader
		if t.auth.Method() == auth.MethodAPIKeyQuery {
			loc = a2a.APIKeySecuritySchemeLocationQuery
		}
		return a2a.NamedSecuritySchemes{
			schemeAPIKey: a2a.APIKeySecurityScheme{Location: loc, Name: t.auth.Scheme(),
				Description: "An API key (ab_<id>_<secret>) from `agentbus keys create`."},
		}, a2a.SecurityRequirementsOptions{{schemeAPIKey: scopes}}
	}
	return nil, nil
}

// skills returns a skill per operation (id = operation id) and per
// command type (id = the type), and their input schemas by id. Switched
// off operations are left out.
func (t *Cards) skills(tenant string) ([]a2a.AgentSkill, map[string]any) {
	var out []a2a.AgentSkill
	schemas := map[string]any{}
	var submit ops.Operation
	for _, op := range t.ops.Operations() {
		if op.ID == "submitCommand" {
			submit = op
		}
		if op.Disabled != "" {
			continue
		}
		schema := map[string]any{"type": "object", "additionalProperties": false, "required": []string{"skill", "input"},
			"properties": map[string]any{"skill": map[string]any{"const": op.ID}, "input": op.InputSchema()}}
		if op.ID == "submitCommand" {
			schema = map[string]any{"anyOf": []any{ops.EnvelopeSchema(), schema}}
		}
		schemas[op.ID] = schema
		example := map[string]any{"skill": op.ID, "input": map[string]any{}}
		if op.ID == "submitCommand" {
			example = nil // the envelope itself is the data part
		}
		s := a2a.AgentSkill{ID: op.ID, Name: op.ID,
			Description: fmt.Sprintf("%s Send a message whose data part is %s; the answer is a message whose data part is {\"outcome\", \"result\"} (result: %s).",
				op.Summary, `{"skill": "`+op.ID+`", "input": {...}}`, outputOf(op)),
			Tags: []string{"operation", op.Capability, "scope:" + string(op.Scope)},
		}
		if op.ID == "submitCommand" {
			s.Description = op.Summary + " Send a message whose data part is the command envelope (or {\"skill\": \"submitCommand\", \"input\": {\"body\": envelope}}); it starts a task whose id is the correlation id, with an artifact per event the command causes; completed once processed, failed when rejected."
		}
		if example != nil {
			s.Examples = []string{mustJSON(example)}
		}
		_, s.SecurityRequirements = t.security(op.Scope)
		out = append(out, s)
	}
	for _, versions := range t.ops.CommandEntries() {
		latest := versions[len(versions)-1]
		var vs []string
		for _, e := range versions {
			vs = append(vs, e.Version)
		}
		url := t.ops.SchemaURL(tenant, catalog.KindCommand, latest)
		schemas[latest.Type] = commandInputSchema(latest, vs)
		desc := latest.Description
		if desc == "" {
			desc = "The " + latest.Type + " command."
		}
		s := a2a.AgentSkill{ID: latest.Type, Name: latest.Type,
			Description: fmt.Sprintf("%s Send a message whose data part is {\"skill\": %q, \"data\": {...}} (optional \"id\", \"version\": one of %s, newest by default); agentbus completes the envelope and starts a task as submitCommand does. data: %s",
				strings.TrimSpace(desc), latest.Type, strings.Join(vs, ", "), url),
			Tags: []string{"command", latest.Type, "scope:" + string(submit.Scope)},
		}
		for _, ex := range examplesOf(latest) {
			s.Examples = append(s.Examples, mustJSON(map[string]any{"skill": latest.Type, "data": ex}))
		}
		_, s.SecurityRequirements = t.security(submit.Scope)
		out = append(out, s)
	}
	return out, schemas
}

// commandInputSchema is the schema of a typed command skill's data part.
func commandInputSchema(e *catalog.Entry, versions []string) map[string]any {
	var data any = map[string]any{"type": "object"}
	if e.Typed() {
		var doc map[string]any
		if json.Unmarshal(e.Doc, &doc) == nil {
			data = doc
		}
	}
	return map[string]any{"type": "object", "additionalProperties": false, "required": []string{"skill", "data"},
		"properties": map[string]any{
			"skill":   map[string]any{"const": e.Type},
			"data":    data,
			"id":      map[string]any{"type": "string", "description": "the envelope id; a fresh UUID when omitted"},
			"version": map[string]any{"enum": versions, "description": "the schema version; the newest when omitted"},
		}}
}

// examplesOf returns the examples array of a command's schema.
func examplesOf(e *catalog.Entry) []any {
	if !e.Typed() {
		return nil
	}
	var doc struct {
		Examples []any `json:"examples"`
	}
	_ = json.Unmarshal(e.Doc, &doc)
	return slices.Clip(doc.Examples)
}

func outputOf(op ops.Operation) string {
	if op.Output == "" {
		return "none"
	}
	return op.Output
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Producer returns the SDK's producer of the card of the tenant tenantOf
// reads from a request's context; it produces the JSON cardProducer
// writes (a2asrv.AgentCardJSONProducer).
func (t *Cards) Producer(tenantOf func(context.Context) string) a2asrv.AgentCardProducer {
	return cardProducer{t, tenantOf}
}

// cardProducer serves the card in the SDK's union of the 1.0 and 0.3
// shapes (a2av0.NewAgentCardProducer), with each security scheme also
// under its 1.0 member (httpAuthSecurityScheme, apiKeySecurityScheme,
// oauth2SecurityScheme): the union writes a scheme in the 0.3 shape, with
// the 1.0 one under a 0.3-only key, which 1.0 readers (the SDK's own
// resolver, @a2a-js/sdk 1.x) do not read. An OAuth2 scheme's 0.3 "flows"
// is the 1.0 one, keyed by flow, as 0.3 has it too. Capabilities say
// "pushNotifications": false outright.
type cardProducer struct {
	t        *Cards
	tenantOf func(context.Context) string
}

var _ a2asrv.AgentCardJSONProducer = cardProducer{}

func (p cardProducer) Card(ctx context.Context) (*a2a.AgentCard, error) {
	return p.t.Card(p.tenantOf(ctx)), nil
}

func (p cardProducer) CardJSON(ctx context.Context) ([]byte, error) {
	card, _ := p.Card(ctx)
	union, ok := a2av0.NewStaticAgentCardProducer(card).(a2asrv.AgentCardJSONProducer)
	if !ok {
		return nil, fmt.Errorf("the SDK's 0.3 card producer does not produce JSON")
	}
	raw, err := union.CardJSON(ctx)
	if err != nil {
		return nil, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	// Said, not left to omitempty: no push notifications (webhooks).
	var caps map[string]json.RawMessage
	if err := json.Unmarshal(doc["capabilities"], &caps); err != nil {
		return nil, err
	}
	caps["pushNotifications"] = json.RawMessage("false")
	if doc["capabilities"], err = json.Marshal(caps); err != nil {
		return nil, err
	}
	if len(card.SecuritySchemes) == 0 {
		return json.Marshal(doc)
	}
	v1, err := json.Marshal(card.SecuritySchemes)
	if err != nil {
		return nil, err
	}
	var schemes, v1Schemes map[string]map[string]json.RawMessage
	if err := json.Unmarshal(doc["securitySchemes"], &schemes); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(v1, &v1Schemes); err != nil {
		return nil, err
	}
	for name, s := range schemes {
		for k, v := range v1Schemes[name] {
			s[k] = v
			if k == "oauth2SecurityScheme" {
				var o struct {
					Flows json.RawMessage `json:"flows"`
				}
				if json.Unmarshal(v, &o) == nil && o.Flows != nil {
					s["flows"] = o.Flows
				}
			}
		}
	}
	if doc["securitySchemes"], err = json.Marshal(schemes); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// grpcTarget is the gRPC target (host:port) of the endpoint URL.
func grpcTarget(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}
