// Package catalog holds the command and event catalogue: the JSON Schemas
// commands are validated against, the event types agentbus can produce, and
// the declarative processing rules ("this command becomes that event").
//
// A catalogue directory looks like this:
//
//	catalog.yaml                      entries and rules
//	commands/<schema>/<version>.json  one JSON Schema per command version
//	events/<schema>/<version>.json    one JSON Schema per typed event version
//
// where <schema> is the kebab-case form of the message type. Schemas are
// compiled once at load; every schema must carry an "examples" array whose
// instances all validate. A load makes a Snapshot; Catalog serves the
// current one and Catalog.Reload replaces it whole.
package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/xeipuuv/gojsonschema"
	"sigs.k8s.io/yaml"
)

// Kind tells commands from events.
type Kind string

const (
	KindCommand Kind = "command"
	KindEvent   Kind = "event"
)

// Expectations an aggregate rule can place on the aggregate's stream.
const (
	ExpectAny    = "any"    // append whatever the aggregate's state (still optimistic)
	ExpectNew    = "new"    // the aggregate must have no events yet
	ExpectExists = "exists" // the aggregate must already have events
)

// Entry is one (type, version) of the catalogue.
type Entry struct {
	Kind        Kind
	Type        string
	Schema      string // kebab-case name
	Version     string
	Description string
	// Doc is the raw JSON Schema document; nil for an untyped event.
	Doc []byte
	// Rule is the declarative processing rule of a command; nil when a
	// built-in or external processor handles the type.
	Rule *Rule
	// Builtin marks a command type of the built-in control-plane
	// catalogue (agentbus's registries process it; operations such as
	// registerAgent submit it).
	Builtin bool
	// Internal marks a command only agentbus, or a processor, submits
	// (catalog.yaml "internal: true"): no caller can submit it through
	// submitCommand, and no transport offers it by type.
	Internal bool

	compiled *gojsonschema.Schema
	bounds   *bounds // nil: the schema sets none
}

// Rule turns a valid command into one event without code.
type Rule struct {
	// Emits is the event type produced; its data is the command's data.
	Emits string `json:"emits"`
	// Aggregate, when set, places the event on an aggregate's subject and
	// checks Expect with optimistic concurrency.
	Aggregate *AggregateRule `json:"aggregate,omitempty"`
}

// AggregateRule names the aggregate a command addresses.
type AggregateRule struct {
	Type    string `json:"type"`    // kebab-case aggregate type, e.g. "order"
	IDField string `json:"idField"` // top-level data property holding the aggregate id
	Expect  string `json:"expect"`  // any | new | exists
}

// Typed reports whether the entry has a schema document.
func (e *Entry) Typed() bool { return e.Doc != nil }

// Domain reports whether the entry is a command of the domain that
// callers submit: neither built-in nor internal. Only those are offered by
// type (MCP typed tools, A2A typed skills).
func (e *Entry) Domain() bool { return e.Kind == KindCommand && !e.Builtin && !e.Internal }

// Validate checks data against the entry's schema and returns every
// violation, with paths rooted at "$.data". Data that breaks the data
// rules JSON Schema cannot state (a member name twice in an object, a
// number a float64 does not carry exactly: envelope.DecodeData) is
// refused for that alone, typed entry or not, before anything else is
// checked: the validator and a reader of the stored bytes could read it
// differently. Data over a size bound of the schema (maxItems, maxLength,
// maxProperties where they always apply) is refused for that alone,
// before the schema is applied, so that its cost is that of reading it
// (see bounds). An untyped entry accepts any object within the data
// rules. Safe for concurrent use.
func (e *Entry) Validate(data []byte) []errs.Violation {
	if e.compiled == nil {
		return envelope.CheckData(data, "$.data")
	}
	loader, doc, problems, ok := loaderFor(data)
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Path < problems[j].Path })
		return problems
	}
	if ok {
		if v := e.bounds.check(doc, "$.data", nil); len(v) > 0 {
			sort.SliceStable(v, func(i, j int) bool { return v[i].Path < v[j].Path })
			return v
		}
	}
	res, err := e.compiled.Validate(loader)
	if err != nil {
		return []errs.Violation{{Path: "$.data", Message: "cannot be validated: " + err.Error()}}
	}
	if res.Valid() {
		return nil
	}
	out := make([]errs.Violation, 0, len(res.Errors()))
	for _, re := range res.Errors() {
		p := "$.data"
		if f := re.Field(); f != "" && f != "(root)" {
			p += "." + f
		}
		// gojsonschema locates a missing required property, and one
		// additionalProperties refuses, at its parent; point at the
		// property itself, as envelope.Decode does.
		if prop, ok := re.Details()["property"].(string); ok && (re.Type() == "required" || re.Type() == "additional_property_not_allowed") {
			p += "." + prop
		}
		out = append(out, errs.Violation{Path: p, Message: re.Description()})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Snapshot is one loaded catalogue. It is immutable and safe for
// concurrent use; Catalog holds the current one.
type Snapshot struct {
	commands map[string]*Entry // "schema/version"
	events   map[string]*Entry
	byType   map[Kind]map[string][]*Entry // versions ascending
}

type file struct {
	Commands []struct {
		Type        string `json:"type"`
		Version     string `json:"version"`
		Description string `json:"description"`
		Process     *Rule  `json:"process,omitempty"`
		Internal    bool   `json:"internal,omitempty"`
	} `json:"commands"`
	Events []struct {
		Type        string `json:"type"`
		Version     string `json:"version"`
		Description string `json:"description"`
		Untyped     bool   `json:"untyped,omitempty"`
	} `json:"events"`
}

// Load reads one or more catalogue directories into a new Catalog (see
// LoadSnapshot for what fails).
func Load(dirs ...fs.FS) (*Catalog, error) {
	s, err := LoadSnapshot(dirs...)
	if err != nil {
		return nil, err
	}
	c := &Catalog{}
	c.cur.Store(s)
	return c, nil
}

// LoadSnapshot reads one or more catalogue directories, later ones adding
// to earlier ones. A (kind, type, version) defined twice is an error, as is
// a bad file, a schema that does not compile, a missing or invalid example,
// or a rule that emits an unknown event.
func LoadSnapshot(dirs ...fs.FS) (*Snapshot, error) {
	c := &Snapshot{
		commands: map[string]*Entry{},
		events:   map[string]*Entry{},
		byType:   map[Kind]map[string][]*Entry{KindCommand: {}, KindEvent: {}},
	}
	for _, dir := range dirs {
		if err := c.load(dir); err != nil {
			return nil, err
		}
	}
	for _, m := range c.byType {
		for _, list := range m {
			sort.Slice(list, func(i, j int) bool { return versionLess(list[i].Version, list[j].Version) })
		}
	}
	for _, e := range c.commands {
		if e.Rule == nil {
			continue
		}
		if len(c.byType[KindEvent][e.Rule.Emits]) == 0 {
			return nil, fmt.Errorf("catalog: command %s %s emits %q, which is not in the event catalogue", e.Type, e.Version, e.Rule.Emits)
		}
	}
	return c, nil
}

func (c *Snapshot) load(dir fs.FS) error {
	raw, err := fs.ReadFile(dir, "catalog.yaml")
	if err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	var f file
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		return fmt.Errorf("catalog: catalog.yaml: %w", err)
	}
	for _, cmd := range f.Commands {
		e := &Entry{Kind: KindCommand, Type: cmd.Type, Version: cmd.Version, Description: cmd.Description, Rule: cmd.Process,
			Builtin: builtinCommands()[cmd.Type], Internal: cmd.Internal}
		if err := c.add(dir, e, false); err != nil {
			return err
		}
		if r := e.Rule; r != nil {
			if !envelope.ValidType(r.Emits) {
				return fmt.Errorf("catalog: command %s: process.emits %q is not a PascalCase type", e.Type, r.Emits)
			}
			if a := r.Aggregate; a != nil {
				if !envelope.ValidSchemaName(a.Type) || a.IDField == "" {
					return fmt.Errorf("catalog: command %s: process.aggregate needs a kebab-case type and an idField", e.Type)
				}
				if bus.IDInSubject(a.Type) {
					return fmt.Errorf("catalog: command %s: process.aggregate.type %q is one of agentbus's own registrations; name another", e.Type, a.Type)
				}
				switch a.Expect {
				case "":
					a.Expect = ExpectAny
				case ExpectAny, ExpectNew, ExpectExists:
				default:
					return fmt.Errorf("catalog: command %s: process.aggregate.expect must be any, new or exists", e.Type)
				}
			}
		}
	}
	for _, ev := range f.Events {
		e := &Entry{Kind: KindEvent, Type: ev.Type, Version: ev.Version, Description: ev.Description}
		if err := c.add(dir, e, ev.Untyped); err != nil {
			return err
		}
	}
	return nil
}

func (c *Snapshot) add(dir fs.FS, e *Entry, untyped bool) error {
	what := fmt.Sprintf("catalog: %s %s %s", e.Kind, e.Type, e.Version)
	if !envelope.ValidType(e.Type) {
		return fmt.Errorf("%s: type must be PascalCase", what)
	}
	if !envelope.ValidVersion(e.Version) {
		return fmt.Errorf("%s: version must be <major>.<minor>", what)
	}
	e.Schema = envelope.KebabCase(e.Type)
	key := e.Schema + "/" + e.Version
	table := c.commands
	if e.Kind == KindEvent {
		table = c.events
	}
	if _, dup := table[key]; dup {
		return fmt.Errorf("%s: defined twice", what)
	}
	if !untyped {
		p := path.Join(string(e.Kind)+"s", e.Schema, e.Version+".json")
		doc, err := fs.ReadFile(dir, p)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := compile(e, doc); err != nil {
			return fmt.Errorf("%s: %s: %w", what, p, err)
		}
	}
	table[key] = e
	c.byType[e.Kind][e.Type] = append(c.byType[e.Kind][e.Type], e)
	return nil
}

func compile(e *Entry, doc []byte) error {
	var meta struct {
		Examples []json.RawMessage `json:"examples"`
	}
	if err := json.Unmarshal(doc, &meta); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	var tree any
	_ = json.Unmarshal(doc, &tree) // a JSON object: checked above
	if err := checkRefs(tree); err != nil {
		return err
	}
	s, err := gojsonschema.NewSchema(gojsonschema.NewBytesLoader(doc))
	if err != nil {
		return fmt.Errorf("does not compile: %w", err)
	}
	e.Doc = bytes.TrimSpace(doc)
	e.compiled = s
	e.bounds = boundsOf(tree)
	if len(meta.Examples) == 0 {
		return fmt.Errorf(`needs an "examples" array with at least one valid instance`)
	}
	for i, ex := range meta.Examples {
		if len(ex) == 0 || ex[0] != '{' {
			return fmt.Errorf("examples[%d] is not an object", i)
		}
		if v := e.Validate(ex); len(v) > 0 {
			return fmt.Errorf("examples[%d] is invalid: %s %s", i, v[0].Path, v[0].Message)
		}
	}
	return nil
}

// versionLess orders "<major>.<minor>" numerically.
func versionLess(a, b string) bool {
	var am, an, bm, bn int
	fmt.Sscanf(a, "%d.%d", &am, &an)
	fmt.Sscanf(b, "%d.%d", &bm, &bn)
	if am != bm {
		return am < bm
	}
	return an < bn
}

// Command returns the command entry for schema/version.
func (c *Snapshot) Command(schema, version string) (*Entry, bool) {
	e, ok := c.commands[schema+"/"+version]
	return e, ok
}

// Event returns the event entry for schema/version.
func (c *Snapshot) Event(schema, version string) (*Entry, bool) {
	e, ok := c.events[schema+"/"+version]
	return e, ok
}

// CommandVersions returns the versions of a command type, oldest first.
func (c *Snapshot) CommandVersions(typ string) []*Entry { return c.byType[KindCommand][typ] }

// LatestEvent returns the newest version of an event type.
func (c *Snapshot) LatestEvent(typ string) (*Entry, bool) {
	l := c.byType[KindEvent][typ]
	if len(l) == 0 {
		return nil, false
	}
	return l[len(l)-1], true
}

// Commands lists every command entry, sorted by schema then version.
func (c *Snapshot) Commands() []*Entry { return sorted(c.commands) }

// Events lists every event entry, sorted by schema then version.
func (c *Snapshot) Events() []*Entry { return sorted(c.events) }

func sorted(m map[string]*Entry) []*Entry {
	out := make([]*Entry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Schema != out[j].Schema {
			return out[i].Schema < out[j].Schema
		}
		return versionLess(out[i].Version, out[j].Version)
	})
	return out
}

// ResolveCommand finds the entry a command envelope names and validates its
// data. It returns UNKNOWN_COMMAND_TYPE when the type is not in the
// catalogue, and VALIDATION_FAILED when dataschema does not belong to the
// type or data does not match the schema.
func (c *Snapshot) ResolveCommand(env *envelope.Envelope) (*Entry, error) {
	versions := c.CommandVersions(env.Type)
	if len(versions) == 0 {
		return nil, &errs.Error{Code: errs.CodeUnknownCommandType,
			Message:    fmt.Sprintf("command type %q is not in the command catalogue (GET /commands lists it)", env.Type),
			Violations: []errs.Violation{{Path: "$.type", Message: "unknown command type"}}}
	}
	schema, version, _ := envelope.ParseDataSchema(env.DataSchema)
	e, ok := c.Command(schema, version)
	if !ok || e.Type != env.Type {
		listed := make([]string, len(versions))
		for i, v := range versions {
			listed[i] = v.Schema + "/" + v.Version
		}
		return nil, errs.Invalid("the envelope is invalid", []errs.Violation{{Path: "$.dataschema",
			Message: fmt.Sprintf("%q is not a schema of %s; the catalogue lists %s", env.DataSchema, env.Type, strings.Join(listed, ", "))}})
	}
	if v := e.Validate(env.Data); len(v) > 0 {
		return nil, errs.Invalid(fmt.Sprintf("data does not match %s/%s", e.Schema, e.Version), v)
	}
	return e, nil
}

// TypedCommands returns the newest entry of every command type of the
// domain (Entry.Domain) with a schema, sorted by schema name: what is
// offered by type.
func (c *Snapshot) TypedCommands() []*Entry {
	var out []*Entry
	seen := map[string]bool{}
	for _, e := range c.Commands() {
		if seen[e.Type] || !e.Typed() || !e.Domain() {
			continue
		}
		seen[e.Type] = true
		v := c.CommandVersions(e.Type)
		out = append(out, v[len(v)-1])
	}
	return out
}
