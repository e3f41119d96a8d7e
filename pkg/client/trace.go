package client

import (
	"context"
	"encoding/json"
	"time"
)

// Trace is a command's story (GET /traces/{id}): the command, its status,
// the events it caused, the webhook deliveries of those events and their
// pushes to live listeners. Raw is the trace exactly as agentbus sent it
// (MarshalJSON writes it back).
type Trace struct {
	ID      string       `json:"id"` // the correlation id
	Command TraceCommand `json:"command"`
	// Status is accepted, processing, processed or rejected.
	Status     string     `json:"status"`
	Rejection  *Rejection `json:"rejection,omitempty"`
	Events     []Event    `json:"events"`
	Deliveries []Delivery `json:"deliveries"`
	// Pushes are the pushes of the events to live listeners, by time, as
	// far as agentbus keeps them (in memory, for recent commands);
	// PushesOmitted counts those past what it keeps of one command.
	Pushes        []Push          `json:"pushes"`
	PushesOmitted int             `json:"pushesOmitted,omitempty"`
	UpdatedAt     time.Time       `json:"updatedAt"`
	Raw           json.RawMessage `json:"-"`
}

// Trace statuses.
const (
	StatusAccepted   = "accepted"
	StatusProcessing = "processing"
	StatusProcessed  = "processed"
	StatusRejected   = "rejected"
)

// Done reports whether the command has its outcome: processed or
// rejected.
func (t *Trace) Done() bool { return t.Status == StatusProcessed || t.Status == StatusRejected }

// Err returns the rejection of a rejected command as an *Error (its code
// and message, Status 0), nil otherwise.
func (t *Trace) Err() error {
	if t.Status != StatusRejected {
		return nil
	}
	r := Rejection{Code: "REJECTED", Message: "the command was rejected"}
	if t.Rejection != nil {
		r = *t.Rejection
	}
	return &Error{Code: r.Code, Message: r.Message, Details: json.RawMessage(`{"correlationId":` + quote(t.ID) + `}`)}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// UnmarshalJSON decodes a trace and keeps it as Raw.
func (t *Trace) UnmarshalJSON(b []byte) error {
	type plain Trace
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*t = Trace(p)
	t.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// MarshalJSON writes Raw, or the fields when Raw is empty.
func (t Trace) MarshalJSON() ([]byte, error) {
	if len(t.Raw) > 0 {
		return t.Raw, nil
	}
	type plain Trace
	return json.Marshal(plain(t))
}

// TraceCommand is what a trace says of the command itself.
type TraceCommand struct {
	ID     string `json:"id,omitempty"` // the envelope id the sender chose
	Type   string `json:"type,omitempty"`
	Source string `json:"source,omitempty"`
	Time   string `json:"time,omitempty"`
}

// Rejection says why a command was rejected.
type Rejection struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Delivery is the webhook delivery of one event to one subscription.
type Delivery struct {
	SubscriptionID string `json:"subscriptionId"`
	EventID        string `json:"eventId"`
	EventType      string `json:"eventType,omitempty"`
	// Cursor is the event's place in the log, an opaque string:
	// ReplayFrom.After takes it.
	Cursor        string `json:"cursor"`
	CorrelationID string `json:"correlationId,omitempty"`
	// Status is delivered, retrying or failed.
	Status   string    `json:"status"`
	Attempts []Attempt `json:"attempts"`
}

// Attempt is one try of a delivery: when, the receiver's status code (0
// when none came), how long it took, the error and the kept excerpt of the
// receiver's answer.
type Attempt struct {
	At         time.Time `json:"at"`
	StatusCode int       `json:"statusCode,omitempty"`
	LatencyMs  float64   `json:"latencyMs"`
	Error      string    `json:"error,omitempty"`
	Response   string    `json:"response,omitempty"`
}

// Push is one push of an event to one live listener: over Transport
// ("sse", "mcp" or "a2a"), at the time the write succeeded, to the
// listener Listener names ("key <id>" or "anonymous": the credential of an
// SSE or A2A task stream; "session <hash>": an MCP session).
type Push struct {
	Transport string    `json:"transport"`
	EventID   string    `json:"eventId"`
	EventType string    `json:"eventType"`
	At        time.Time `json:"at"`
	Listener  string    `json:"listener"`
}

// Trace returns the trace of the command with correlation id; an *Error
// TRACE_NOT_FOUND when agentbus knows no such command.
func (c *Client) Trace(ctx context.Context, id string) (*Trace, error) {
	var t Trace
	if err := c.getJSON(ctx, "/traces/"+pathID(id), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}
