package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// Agent is the agents registry's record of an agent. Raw is the record as
// agentbus sent it (MarshalJSON writes it back).
type Agent struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Accepts     []string `json:"accepts"`
	Produces    []string `json:"produces"`
	// Status is active, paused or failed (Error says why).
	Status    string `json:"status"`
	Error     string `json:"error,omitempty"`
	CreatedAt string `json:"createdAt"`
	UpdatedAt string `json:"updatedAt"`
	// Pending is what waits for the agent (GetAgent only; nil when
	// agentbus could not read it).
	Pending *AgentPending   `json:"pending,omitempty"`
	Raw     json.RawMessage `json:"-"`
}

// AgentPending is what waits for an agent: commands not yet delivered to
// it (held while it is paused), and commands delivered and not yet
// acknowledged.
type AgentPending struct {
	Commands uint64 `json:"commands"`
	InFlight int    `json:"inFlight"`
}

// Service is the services registry's record of a service.
type Service struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Accepts     []string        `json:"accepts"`
	Produces    []string        `json:"produces"`
	CreatedAt   string          `json:"createdAt"`
	Raw         json.RawMessage `json:"-"`
}

// Subscription is a webhook subscription's record. It never carries the
// signing secret: SubscriptionSecret reads it.
type Subscription struct {
	ID        string `json:"id"`
	ServiceID string `json:"serviceId,omitempty"`
	Webhook   struct {
		URL string `json:"url"`
	} `json:"webhook"`
	// Filter is nil when every event type is delivered.
	Filter *struct {
		Types []string `json:"types"`
	} `json:"filter,omitempty"`
	// Status is active, failing or disabled (StatusReason says why).
	Status       string          `json:"status"`
	StatusReason string          `json:"statusReason,omitempty"`
	CreatedAt    string          `json:"createdAt"`
	UpdatedAt    string          `json:"updatedAt"`
	Raw          json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the record and keeps it as Raw.
func (a *Agent) UnmarshalJSON(b []byte) error {
	type plain Agent
	return unmarshalRaw(b, (*plain)(a), &a.Raw)
}

// MarshalJSON writes Raw, or the fields when Raw is empty.
func (a Agent) MarshalJSON() ([]byte, error) {
	type plain Agent
	return marshalRaw(a.Raw, plain(a))
}

// UnmarshalJSON decodes the record and keeps it as Raw.
func (s *Service) UnmarshalJSON(b []byte) error {
	type plain Service
	return unmarshalRaw(b, (*plain)(s), &s.Raw)
}

// MarshalJSON writes Raw, or the fields when Raw is empty.
func (s Service) MarshalJSON() ([]byte, error) {
	type plain Service
	return marshalRaw(s.Raw, plain(s))
}

// UnmarshalJSON decodes the record and keeps it as Raw.
func (s *Subscription) UnmarshalJSON(b []byte) error {
	type plain Subscription
	return unmarshalRaw(b, (*plain)(s), &s.Raw)
}

// MarshalJSON writes Raw, or the fields when Raw is empty.
func (s Subscription) MarshalJSON() ([]byte, error) {
	type plain Subscription
	return marshalRaw(s.Raw, plain(s))
}

func unmarshalRaw(b []byte, into any, raw *json.RawMessage) error {
	if err := json.Unmarshal(b, into); err != nil {
		return err
	}
	*raw = append(json.RawMessage(nil), b...)
	return nil
}

func marshalRaw(raw json.RawMessage, v any) ([]byte, error) {
	if len(raw) > 0 {
		return raw, nil
	}
	return json.Marshal(v)
}

// AgentSpec is what registers an agent (POST /agents).
type AgentSpec struct {
	ID          string   `json:"id,omitempty"` // "" lets agentbus choose
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Accepts     []string `json:"accepts,omitempty"`
	Produces    []string `json:"produces,omitempty"`
}

// ServiceSpec is what registers a service (POST /services).
type ServiceSpec = AgentSpec

// AgentPage, ServicePage and SubscriptionPage are pages of a registry;
// Next is the cursor of the next page ("" at the end).
type (
	AgentPage struct {
		Agents []Agent `json:"agents"`
		Next   string  `json:"next,omitempty"`
	}
	ServicePage struct {
		Services []Service `json:"services"`
		Next     string    `json:"next,omitempty"`
	}
	SubscriptionPage struct {
		Subscriptions []Subscription `json:"subscriptions"`
		Next          string         `json:"next,omitempty"`
	}
)

// change runs a registry write (method on path with body) and, when
// agentbus answers 202 (the outcome took longer than its wait), waits for
// the command's outcome itself: a rejection comes back as its *Error. It
// returns the body of a direct answer, or, after waiting, nil and the
// trace of the processed command.
func (c *Client) change(ctx context.Context, method, path string, body []byte) ([]byte, *Trace, error) {
	a, err := c.do(ctx, method, path, nil, body)
	if err != nil {
		return nil, nil, err
	}
	if a.status != http.StatusAccepted {
		return a.body, nil, nil
	}
	var q struct {
		ID string `json:"id"`
	}
	if err := decode(a.body, &q); err != nil {
		return nil, nil, err
	}
	t, err := c.Wait(ctx, q.ID)
	if err != nil {
		return nil, nil, err
	}
	if err := t.Err(); err != nil {
		return nil, nil, err
	}
	return nil, t, nil
}

// RegisterAgent registers an agent and returns its record. Errors:
// VALIDATION_FAILED, AGENT_ALREADY_REGISTERED, QUOTA_EXCEEDED, ...
func (c *Client) RegisterAgent(ctx context.Context, spec AgentSpec) (*Agent, error) {
	var out Agent
	if err := c.register(ctx, "/agents", spec, func(id string) error { return c.getJSON(ctx, "/agents/"+pathID(id), nil, &out) }, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RegisterService registers a service and returns its record. Errors:
// VALIDATION_FAILED, SERVICE_ALREADY_REGISTERED, QUOTA_EXCEEDED, ...
func (c *Client) RegisterService(ctx context.Context, spec ServiceSpec) (*Service, error) {
	var out Service
	if err := c.register(ctx, "/services", spec, func(id string) error { return c.getJSON(ctx, "/services/"+pathID(id), nil, &out) }, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateSubscription creates a webhook subscription from its JSON body
// ({"serviceId"?, "webhook":{"url","secret"?}, "filter"?:{"types"}}) and
// returns its record, which never carries the signing secret: given or
// generated, SubscriptionSecret reads it. Errors: VALIDATION_FAILED,
// WEBHOOK_URL_REJECTED, SERVICE_NOT_FOUND, ...
func (c *Client) CreateSubscription(ctx context.Context, body json.RawMessage) (*Subscription, error) {
	b, t, err := c.change(ctx, http.MethodPost, "/subscriptions", body)
	if err != nil {
		return nil, err
	}
	if t != nil { // the subscription's id is its command's correlation id
		return c.GetSubscription(ctx, t.ID)
	}
	var out Subscription
	if err := decode(b, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// register posts spec to path; a direct answer is decoded into out, a
// queued one is read back with get once processed.
func (c *Client) register(ctx context.Context, path string, spec any, get func(id string) error, out any) error {
	body, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	b, _, err := c.change(ctx, http.MethodPost, path, body)
	if err != nil {
		return err
	}
	if b != nil {
		return decode(b, out)
	}
	var head struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &head)
	return get(head.ID)
}

// ListAgents reads a page of the agents registry.
func (c *Client) ListAgents(ctx context.Context, p Page) (*AgentPage, error) {
	return get[AgentPage](ctx, c, "/agents", p.query())
}

// ListServices reads a page of the services registry.
func (c *Client) ListServices(ctx context.Context, p Page) (*ServicePage, error) {
	return get[ServicePage](ctx, c, "/services", p.query())
}

// ListSubscriptions reads a page of the webhook subscriptions.
func (c *Client) ListSubscriptions(ctx context.Context, p Page) (*SubscriptionPage, error) {
	return get[SubscriptionPage](ctx, c, "/subscriptions", p.query())
}

// GetAgent returns an agent's record; AGENT_NOT_FOUND.
func (c *Client) GetAgent(ctx context.Context, id string) (*Agent, error) {
	return get[Agent](ctx, c, "/agents/"+pathID(id), nil)
}

// GetService returns a service's record; SERVICE_NOT_FOUND.
func (c *Client) GetService(ctx context.Context, id string) (*Service, error) {
	return get[Service](ctx, c, "/services/"+pathID(id), nil)
}

// GetSubscription returns a subscription's record; SUBSCRIPTION_NOT_FOUND.
func (c *Client) GetSubscription(ctx context.Context, id string) (*Subscription, error) {
	return get[Subscription](ctx, c, "/subscriptions/"+pathID(id), nil)
}

// PauseAgent pauses an agent: the commands it accepts queue until it is
// resumed. Errors: AGENT_NOT_FOUND, AGENT_ALREADY_PAUSED.
func (c *Client) PauseAgent(ctx context.Context, id string) error {
	_, _, err := c.change(ctx, http.MethodPost, "/agents/"+pathID(id)+"/pause", nil)
	return err
}

// ResumeAgent resumes a paused agent. Errors: AGENT_NOT_FOUND,
// AGENT_NOT_PAUSED.
func (c *Client) ResumeAgent(ctx context.Context, id string) error {
	_, _, err := c.change(ctx, http.MethodPost, "/agents/"+pathID(id)+"/resume", nil)
	return err
}

// DeleteAgent deletes an agent and its consumer; AGENT_NOT_FOUND.
func (c *Client) DeleteAgent(ctx context.Context, id string) error {
	_, _, err := c.change(ctx, http.MethodDelete, "/agents/"+pathID(id), nil)
	return err
}

// DeleteService deletes a service and the subscriptions carrying its id;
// SERVICE_NOT_FOUND.
func (c *Client) DeleteService(ctx context.Context, id string) error {
	_, _, err := c.change(ctx, http.MethodDelete, "/services/"+pathID(id), nil)
	return err
}

// DeleteSubscription deletes a subscription and erases its secret;
// SUBSCRIPTION_NOT_FOUND.
func (c *Client) DeleteSubscription(ctx context.Context, id string) error {
	_, _, err := c.change(ctx, http.MethodDelete, "/subscriptions/"+pathID(id), nil)
	return err
}

// EnableSubscription enables a disabled or failing subscription again.
// Errors: SUBSCRIPTION_NOT_FOUND, SUBSCRIPTION_ALREADY_ACTIVE.
func (c *Client) EnableSubscription(ctx context.Context, id string) error {
	_, _, err := c.change(ctx, http.MethodPost, "/subscriptions/"+pathID(id)+"/enable", nil)
	return err
}

// DisableSubscription disables a subscription (nothing is delivered to it
// until it is enabled again) by sending the DisableSubscription command
// with reason and waiting for its outcome. Errors: SUBSCRIPTION_NOT_FOUND,
// CONFLICT (disabled already).
func (c *Client) DisableSubscription(ctx context.Context, id, reason string) error {
	data, err := json.Marshal(map[string]string{"id": id, "reason": reason})
	if err != nil {
		return err
	}
	t, err := c.SendAndWait(ctx, Command{Type: "DisableSubscription", Data: data})
	if err != nil {
		return err
	}
	return t.Err()
}

// Deliveries returns a subscription's webhook deliveries, each with its
// attempts; SUBSCRIPTION_NOT_FOUND.
func (c *Client) Deliveries(ctx context.Context, id string) ([]Delivery, error) {
	var out struct {
		Deliveries []Delivery `json:"deliveries"`
	}
	if err := c.getJSON(ctx, "/subscriptions/"+pathID(id)+"/deliveries", nil, &out); err != nil {
		return nil, err
	}
	return out.Deliveries, nil
}

// get reads path with query and decodes the answer as a T; nil and the
// error on failure.
func get[T any](ctx context.Context, c *Client, path string, query url.Values) (*T, error) {
	var out T
	if err := c.getJSON(ctx, path, query, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SubscriptionSecret returns a subscription's current signing secret,
// given or generated, to verify its deliveries with; the write scope reads
// it, and no other answer carries it. Errors: SUBSCRIPTION_NOT_FOUND,
// FORBIDDEN.
func (c *Client) SubscriptionSecret(ctx context.Context, id string) (string, error) {
	var out struct {
		Secret string `json:"secret"`
	}
	if err := c.getJSON(ctx, "/subscriptions/"+pathID(id)+"/secret", nil, &out); err != nil {
		return "", err
	}
	return out.Secret, nil
}

// Rotation is the answer to a secret rotation: the previous secret keeps
// signing beside the new one until PreviousSecretValidUntil. It never
// carries the new secret: SubscriptionSecret reads it.
type Rotation struct {
	ID                       string `json:"id"`
	PreviousSecretValidUntil string `json:"previousSecretValidUntil"`
}

// RotateSubscriptionSecret replaces a subscription's signing secret with
// secret, or with one agentbus generates when secret is ""
// (SubscriptionSecret reads it). Errors: VALIDATION_FAILED (a secret too
// short or not printable ASCII), SUBSCRIPTION_NOT_FOUND.
func (c *Client) RotateSubscriptionSecret(ctx context.Context, id, secret string) (*Rotation, error) {
	body := []byte("{}")
	if secret != "" {
		var err error
		if body, err = json.Marshal(map[string]string{"secret": secret}); err != nil {
			return nil, err
		}
	}
	b, t, err := c.change(ctx, http.MethodPost, "/subscriptions/"+pathID(id)+"/secret", body)
	if err != nil {
		return nil, err
	}
	out := Rotation{ID: id}
	if t != nil { // the rotation's event says until when the previous secret signs
		for _, e := range t.Events {
			if e.Type == "SubscriptionSecretRotated" {
				_ = json.Unmarshal(e.Data, &out)
			}
		}
		return &out, nil
	}
	if err := decode(b, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Redelivery is the answer to a redelivery: how many dead letters are
// delivered again.
type Redelivery struct {
	ID          string `json:"id"`
	DeadLetters int    `json:"deadLetters"`
}

// RedeliverSubscription delivers a subscription's dead letters again, in
// order, before its next events (admin scope). Errors:
// SUBSCRIPTION_NOT_FOUND, FORBIDDEN.
func (c *Client) RedeliverSubscription(ctx context.Context, id string) (*Redelivery, error) {
	a, err := c.do(ctx, http.MethodPost, "/subscriptions/"+pathID(id)+"/redeliver", nil, []byte("{}"))
	if err != nil {
		return nil, err
	}
	var out Redelivery
	if err := decode(a.body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReplayFrom says where a replay moves a subscription's delivery: after the
// event of cursor After (a delivery record's Cursor, or a page's Next; "0"
// for the start of the log), or, when After is "", after the last event
// stored before Since.
type ReplayFrom struct {
	After string
	Since time.Time
}

// Replayed is the answer to a replay: the cursor of the event delivery
// goes on after ("0": the start of the log).
type Replayed struct {
	ID    string `json:"id"`
	After string `json:"after"`
}

// ReplaySubscription moves a subscription's delivery to from (admin
// scope): back, events come again; forward, those passed over are never
// delivered. Errors: VALIDATION_FAILED, SUBSCRIPTION_NOT_FOUND, FORBIDDEN.
func (c *Client) ReplaySubscription(ctx context.Context, id string, from ReplayFrom) (*Replayed, error) {
	in := map[string]any{}
	if from.After != "" {
		in["after"] = from.After
	} else {
		in["since"] = from.Since.UTC().Format(time.RFC3339Nano)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	a, err := c.do(ctx, http.MethodPost, "/subscriptions/"+pathID(id)+"/replay", nil, body)
	if err != nil {
		return nil, err
	}
	var out Replayed
	if err := decode(a.body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
