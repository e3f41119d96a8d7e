package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/google/uuid"
)

// TypedCommand is a command given by its type and its data alone, as the
// typed command tools of a transport take it (MCP, A2A); PrepareTyped
// completes its envelope.
type TypedCommand struct {
	// Type is the command type (PascalCase), one of the catalogue's.
	Type string
	// Version picks the schema version; "" for the newest.
	Version string
	// Data is the command's data, a JSON object checked against the
	// schema; none is {}.
	Data json.RawMessage
	// ID is the envelope id; "" for a fresh random UUID. The same (source,
	// ID) is the same command (resubmitting returns its correlation id and
	// queues nothing).
	ID string
	// Source is the envelope source: who sends it, CallerSource of the
	// caller's credential.
	Source string
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

// PreparedCommand is a completed command envelope, ready for submitCommand.
type PreparedCommand struct {
	// Body is the envelope as submitCommand takes it.
	Body []byte
	// CorrelationID is the id submitCommand will answer for it: a watch on
	// it registered before submitting misses none of its events.
	CorrelationID string
}

// PrepareTyped completes the envelope of c for tenant: specversion 1.0,
// id (c.ID, or a fresh UUID), source c.Source, the type, datacontenttype
// application/json, dataschema the relative {schema}/{version} of the
// catalogue version c.Version names (the newest when ""), time now and
// data.
// It checks only what it needs to build it: UNKNOWN_COMMAND_TYPE for a
// type not in the catalogue, or not offered by type (built-in and internal
// commands: catalog.Entry.Domain); submitting the envelope checks
// everything else exactly as POST /commands does. Safe for concurrent use.
func (s *Surface) PrepareTyped(tenant string, c TypedCommand) (*PreparedCommand, error) {
	versions := s.cat.CommandVersions(c.Type)
	if len(versions) == 0 {
		return nil, &errs.Error{Code: errs.CodeUnknownCommandType,
			Message:    fmt.Sprintf("command type %q is not in the command catalogue (listCommandCatalog lists it)", c.Type),
			Violations: []errs.Violation{{Path: "$.type", Message: "unknown command type"}}}
	}
	if !versions[len(versions)-1].Domain() {
		return nil, &errs.Error{Code: errs.CodeUnknownCommandType,
			Message: fmt.Sprintf("command type %q is built in or internal: it is not submitted by type "+
				"(its operation, such as registerAgent or createSubscription, submits it; submitCommand takes its envelope)", c.Type),
			Violations: []errs.Violation{{Path: "$.type", Message: "not offered by type"}}}
	}
	e := versions[len(versions)-1]
	schema := e.Schema + "/" + e.Version
	if c.Version != "" {
		schema = e.Schema + "/" + c.Version // submitting refuses a version not listed
	}
	id := c.ID
	if id == "" {
		id = uuid.NewString()
	}
	data := c.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	if !json.Valid(data) {
		return nil, &errs.Error{Code: errs.CodeMalformedJSON, Message: "the command data is not valid JSON"}
	}
	env := &envelope.Envelope{SpecVersion: envelope.SpecVersion, ID: id, Source: c.Source, Type: c.Type,
		DataContentType: envelope.ContentType, DataSchema: schema, Time: decide.Stamp(s.now()), Data: data}
	body := env.Marshal()
	return &PreparedCommand{Body: body, CorrelationID: envelope.CorrelationID(tenant, c.Source, id)}, nil
}

// CommandCorrelation returns the correlation id submitCommand would answer
// for body, a command envelope of tenant, read before it is checked; false
// when body has no non-empty string id and source (it will then be
// refused).
func CommandCorrelation(tenant string, body []byte) (string, bool) {
	id, source, ok := commandHead(body)
	if !ok {
		return "", false
	}
	return envelope.CorrelationID(tenant, source, id), true
}

// commandHead reads the id and source of a command envelope, before it is
// checked; ok is false unless both are non-empty strings.
func commandHead(body []byte) (id, source string, ok bool) {
	var head struct {
		ID     *string `json:"id"`
		Source *string `json:"source"`
	}
	if json.Unmarshal(body, &head) != nil || head.ID == nil || head.Source == nil || *head.ID == "" || *head.Source == "" {
		return "", "", false
	}
	return *head.ID, *head.Source, true
}

// callerSourcePrefix begins every CallerSource.
const callerSourcePrefix = "agentbus/caller/"

// submitAs submits a command envelope of tenant for caller, as
// submitCommand does (ingest.Ingest.SubmitCommand, its checks and errors),
// refusing (VALIDATION_FAILED at $.source) a source that is another
// caller's CallerSource: the source of typed commands is the caller's
// identity, and no one may take another caller's typed command ids first.
// The envelope is checked first (its errors come before that one).
func (s *Surface) submitAs(ctx context.Context, caller, tenant string, body []byte) (*ingest.Accepted, error) {
	return s.in.SubmitChecked(ctx, tenant, body, func(env *envelope.Envelope) error {
		if strings.HasPrefix(env.Source, callerSourcePrefix) && env.Source != CallerSource(caller) {
			return errs.Invalid("the command's source is reserved", []errs.Violation{{Path: "$.source",
				Message: "sources under " + callerSourcePrefix + " name the credential that submits a typed command; this one is another's"}})
		}
		return nil
	})
}

// TypedCommands returns the newest catalogue entry of every command type
// of the domain with a schema, sorted by schema name: what typed command
// tools offer (catalog.Snapshot.TypedCommands).
func (s *Surface) TypedCommands() []*catalog.Entry { return s.cat.TypedCommands() }

// SnakeCase turns a PascalCase type into the name of its typed command
// tool: PlaceOrder → place_order.
func SnakeCase(typ string) string {
	var b strings.Builder
	for i, r := range typ {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
