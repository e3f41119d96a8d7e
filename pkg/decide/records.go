package decide

import (
	"encoding/json"
	"slices"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
)

// Agent is the agents registry's record of an agent.
type Agent struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Accepts     []string `json:"accepts"`
	Produces    []string `json:"produces"`
	Status      string   `json:"status"` // active | paused | failed
	// Error says why the agent's consumer could not be made (status
	// failed).
	Error     string `json:"error,omitempty"`
	CreatedAt string `json:"createdAt"`
	UpdatedAt string `json:"updatedAt"`
}

// Service is the services registry's record of a service.
type Service struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Accepts     []string `json:"accepts"`
	Produces    []string `json:"produces"`
	CreatedAt   string   `json:"createdAt"`
}

// Fold applies one event of aggregate id to its record: it returns the
// new record, nil when the aggregate is gone, or cur for an event it
// ignores; false when the event would act on the record but its data does
// not decode or its data.id is not id (records are stored under the
// subject's id and carry data.id; any NATS publisher can append to the
// log). Records are never changed in place, so readers may keep them.
type Fold[T any] func(cur *T, id, typ string, data json.RawMessage) (*T, bool)

// FoldAgent is the agent aggregate's Fold.
func FoldAgent(cur *Agent, id, typ string, data json.RawMessage) (*Agent, bool) {
	switch typ {
	case TypeAgentRegistered:
		r, ok := RegistrationOf(id, data)
		if !ok {
			return cur, false
		}
		return &Agent{ID: r.ID, Name: r.Name, Description: r.Description, Accepts: nonNil(r.Accepts),
			Produces: nonNil(r.Produces), Status: AgentActive, CreatedAt: r.CreatedAt, UpdatedAt: r.CreatedAt}, true
	case TypeAgentPaused, TypeAgentResumed:
		if cur == nil {
			return nil, true
		}
		c, ok := changeOf(id, data)
		if !ok {
			return cur, false
		}
		next := *cur
		next.Status, next.Error, next.UpdatedAt = AgentActive, "", c.At
		if typ == TypeAgentPaused {
			next.Status = AgentPaused
		}
		return &next, true
	case TypeAgentConsumerFailed:
		if cur == nil {
			return nil, true
		}
		var f ConsumerFailure
		if err := json.Unmarshal(data, &f); err != nil || f.ID != id {
			return cur, false
		}
		next := *cur
		next.Status, next.Error, next.UpdatedAt = AgentFailed, f.Error, f.At
		return &next, true
	case TypeAgentDeleted:
		return deleted(cur, id, data)
	}
	return cur, true
}

// FoldService is the service aggregate's Fold.
func FoldService(cur *Service, id, typ string, data json.RawMessage) (*Service, bool) {
	switch typ {
	case TypeServiceRegistered:
		r, ok := RegistrationOf(id, data)
		if !ok {
			return cur, false
		}
		return &Service{ID: r.ID, Name: r.Name, Description: r.Description, Accepts: nonNil(r.Accepts),
			Produces: nonNil(r.Produces), CreatedAt: r.CreatedAt}, true
	case TypeServiceDeleted:
		return deleted(cur, id, data)
	}
	return cur, true
}

// deleted folds a delete event of aggregate id: the record goes.
func deleted[T any](cur *T, id string, data json.RawMessage) (*T, bool) {
	if cur == nil {
		return nil, true
	}
	if _, ok := changeOf(id, data); !ok {
		return cur, false
	}
	return nil, true
}

// RegistrationOf reads the data of a registration event of aggregate id;
// false when it does not decode, names another id or lists a type that is
// not a message type (types become consumer filters: only what the
// registration schemas allow, never a wildcard).
func RegistrationOf(id string, data json.RawMessage) (Registration, bool) {
	var r Registration
	if err := json.Unmarshal(data, &r); err != nil || r.ID != id {
		return r, false
	}
	for _, t := range slices.Concat(r.Accepts, r.Produces) {
		if !envelope.ValidType(t) {
			return r, false
		}
	}
	return r, true
}

// changeOf reads the data of a pause, resume or delete event of aggregate
// id; false when it does not decode or names another id.
func changeOf(id string, data json.RawMessage) (Change, bool) {
	var c Change
	err := json.Unmarshal(data, &c)
	return c, err == nil && c.ID == id
}

// EventData returns the data member of a stored event's envelope.
func EventData(m *bus.Message) (json.RawMessage, error) {
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	err := json.Unmarshal(m.Data, &env)
	return env.Data, err
}
