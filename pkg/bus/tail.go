package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/pkg/envelope"
)

// Tail hands out the events of the event log as they are stored: the
// replica's one follower of the log (pkg/follow), which reads each event
// once for all its listeners, or a Log's own Follow (LogTail).
type Tail interface {
	// Follow starts calling fn with every event matching filter (one
	// subject, wildcards allowed) from sequence from on, in stream order,
	// from one goroutine, and returns. It keeps following, without
	// skipping an event, until ctx ends. The Event, and its Message, may
	// be handed to other listeners too: fn must not change them.
	Follow(ctx context.Context, filter string, from uint64, fn func(*Event))
}

// Event is one message of the event log with what its subject and
// headers say, read once for every listener it is handed to.
type Event struct {
	*Message
	// Tenant, AggType and Type are the subject's tokens, when Parsed
	// (Subjects.ParseEvent accepts the subject); "" otherwise. AggID is
	// the aggregate id (AggregateID), "" when it has none.
	Tenant, AggType, AggID, Type string
	Parsed                       bool
	// CorrelationID is HeaderCorrelationID's value, or "".
	CorrelationID string

	once        sync.Once
	id, envType string
	object      bool
}

// NewEvent reads the subject and headers of m, an event under subj's
// prefix.
func NewEvent(subj Subjects, m *Message) *Event {
	ev := &Event{Message: m, CorrelationID: m.Header.Get(HeaderCorrelationID)}
	var token string
	ev.Tenant, ev.AggType, token, ev.Type, ev.Parsed = subj.ParseEvent(m.Subject)
	ev.AggID = AggregateID(token, m.Header)
	return ev
}

// AggregateID returns the aggregate id of an event with aggregate token
// token (Subjects.ParseEvent) and headers h: the token itself when it is
// an id, the HeaderAggregateID of an event in a shard when that id belongs
// in the shard, "" otherwise (no aggregate, or a header that does not
// match: anyone with NATS access can publish such an event).
func AggregateID(token string, h Header) string {
	switch {
	case token == NoAggregate || token == "":
		return ""
	case !IsShard(token):
		return token
	}
	id := h.Get(HeaderAggregateID)
	if !envelope.ValidTokenID(id) || ShardOf(id) != token {
		return ""
	}
	return id
}

// Envelope returns the envelope's "id" and "type" ("" when absent or not
// strings) and whether the payload is a JSON object (JSONObject). The
// payload is decoded at the first call, once for every caller; safe for
// concurrent use.
func (e *Event) Envelope() (id, typ string, object bool) {
	e.once.Do(func() {
		var env struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		}
		err := json.Unmarshal(e.Data, &env)
		var wrongType *json.UnmarshalTypeError
		// Unmarshal checks the whole payload is valid JSON before it
		// decodes: a field of another type leaves it valid.
		valid := err == nil || errors.As(err, &wrongType)
		d := bytes.TrimLeft(e.Data, " \t\r\n")
		e.id, e.envType, e.object = env.ID, env.Type, valid && len(d) > 0 && d[0] == '{'
	})
	return e.id, e.envType, e.object
}

// LogTail returns the Tail of log on its own Follow: every listener then
// reads each event for itself.
func LogTail(log Log, subj Subjects) Tail { return logTail{log, subj} }

type logTail struct {
	log  Log
	subj Subjects
}

func (t logTail) Follow(ctx context.Context, filter string, from uint64, fn func(*Event)) {
	t.log.Follow(ctx, filter, from, func(m *Message) { fn(NewEvent(t.subj, m)) })
}

// SubjectMatches reports whether subject matches filter under NATS's
// rules: "*" takes one token, a last ">" one or more. A filter's literal
// start and literal last token rule most subjects out at once.
func SubjectMatches(subject, filter string) bool {
	lit := filter
	if i := strings.IndexAny(filter, "*>"); i >= 0 {
		lit = filter[:i]
	}
	if !strings.HasPrefix(subject, lit) {
		return false
	}
	if i := strings.LastIndexByte(filter, '.'); i >= 0 && filter[i+1:] != "*" && filter[i+1:] != ">" &&
		!strings.HasSuffix(subject, filter[i:]) {
		return false
	}
	for {
		ftok, frest, fmore := strings.Cut(filter, ".")
		if ftok == ">" && !fmore {
			return subject != ""
		}
		stok, srest, smore := strings.Cut(subject, ".")
		if ftok != "*" && ftok != stok {
			return false
		}
		if !fmore || !smore {
			return !fmore && !smore
		}
		filter, subject = frest, srest
	}
}
