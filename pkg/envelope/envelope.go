// Package envelope decodes and checks the message envelope shared by commands
// and events, and derives agentbus's deterministic identifiers. It knows
// nothing of the catalogue, NATS or HTTP.
package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/google/uuid"
)

// SpecVersion and ContentType are the only values the envelope allows.
const (
	SpecVersion = "1.0"
	ContentType = "application/json"
)

// Limits on envelope strings. They keep ids usable as keys and logs readable.
const (
	MaxIDLen     = 256
	MaxSourceLen = 1024
	MaxTypeLen   = 128
)

// Envelope is the wire envelope of a command or an event. Field order is the
// order agentbus writes; no other top-level property exists.
type Envelope struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	DataContentType string          `json:"datacontenttype"`
	DataSchema      string          `json:"dataschema,omitempty"`
	Time            string          `json:"time"`
	Data            json.RawMessage `json:"data"`
}

// Kind selects the rules Decode applies: a command needs a relative
// dataschema; an event may omit it.
type Kind int

const (
	Command Kind = iota
	Event
)

var allowed = map[string]bool{
	"specversion": true, "id": true, "source": true, "type": true,
	"datacontenttype": true, "dataschema": true, "time": true, "data": true,
}

// Decode parses raw as an envelope of the given kind and checks every
// envelope rule. It returns a *errs.Error with code MALFORMED_JSON when raw
// is not a single JSON object, or VALIDATION_FAILED listing every violation
// with its JSON path. Catalogue membership of Type and validation of Data are
// the caller's job. Safe for concurrent use.
func Decode(raw []byte, kind Kind) (*Envelope, error) {
	fields, err := splitObject(raw)
	if err != nil {
		return nil, err
	}
	var env Envelope
	var v []errs.Violation
	add := func(path, msg string) { v = append(v, errs.Violation{Path: path, Message: msg}) }

	for _, k := range fields.order {
		if !allowed[k] {
			add("$."+k, "property is not allowed in the envelope")
		}
	}
	for _, k := range fields.dups {
		add("$."+k, "property appears more than once")
	}
	str := func(name string, required bool) string {
		rawv, ok := fields.values[name]
		if !ok {
			if required {
				add("$."+name, "required property is missing")
			}
			return ""
		}
		// null unmarshals into a string without error, so check the JSON kind too.
		s, ok := jsonString(rawv)
		if !ok {
			add("$."+name, "must be a string")
			return ""
		}
		return s
	}

	env.SpecVersion = str("specversion", true)
	if _, ok := fields.values["specversion"]; ok && env.SpecVersion != SpecVersion && validString(fields.values["specversion"]) {
		add("$.specversion", `must be "1.0"`)
	}
	env.ID = str("id", true)
	checkText(add, "$.id", env.ID, fields.values["id"], MaxIDLen)
	env.Source = str("source", true)
	checkText(add, "$.source", env.Source, fields.values["source"], MaxSourceLen)
	env.Type = str("type", true)
	if _, ok := fields.values["type"]; ok && validString(fields.values["type"]) {
		if !ValidType(env.Type) {
			add("$.type", "must be a PascalCase message type ([A-Z][A-Za-z0-9]*, at most 128 characters)")
		}
	}
	env.DataContentType = str("datacontenttype", true)
	if _, ok := fields.values["datacontenttype"]; ok && validString(fields.values["datacontenttype"]) && env.DataContentType != ContentType {
		add("$.datacontenttype", `must be "application/json"`)
	}
	env.DataSchema = str("dataschema", kind == Command)
	if _, ok := fields.values["dataschema"]; ok && validString(fields.values["dataschema"]) {
		if _, _, ok := ParseDataSchema(env.DataSchema); kind == Command && !ok {
			add("$.dataschema", "must be a relative reference {schema}/{version}, e.g. place-order/1.0")
		}
		switch {
		case kind == Event && env.DataSchema == "":
			add("$.dataschema", "must not be empty; omit it for an untyped event")
		case kind == Event && !validEventSchemaRef(env.DataSchema):
			add("$.dataschema", "must be an absolute http(s) URL of the data's JSON Schema, or {schema}/{version} of the event catalogue")
		}
	}
	env.Time = str("time", true)
	if _, ok := fields.values["time"]; ok && validString(fields.values["time"]) {
		if _, err := time.Parse(time.RFC3339Nano, env.Time); err != nil {
			add("$.time", "must be an RFC 3339 date-time, e.g. 2026-01-02T15:04:05Z")
		}
	}
	if d, ok := fields.values["data"]; !ok {
		add("$.data", "required property is missing")
	} else if len(d) == 0 || d[0] != '{' {
		add("$.data", "must be a JSON object")
	} else {
		env.Data = d
	}
	if len(v) > 0 {
		return nil, errs.Invalid("the envelope is invalid", v)
	}
	return &env, nil
}

func validString(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '"' }

func checkText(add func(string, string), path, s string, raw json.RawMessage, max int) {
	if !validString(raw) {
		return
	}
	switch {
	case strings.TrimSpace(s) == "":
		add(path, "must not be empty")
	case len(s) > max:
		add(path, "is too long")
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		add(path, "must not contain control characters")
	case strings.ContainsRune(s, utf8.RuneError) && loneSurrogate(raw):
		// Decoded, it would be U+FFFD, the same as "\ufffd" or the
		// character itself: two ids would become one. (Only a string that
		// decoded to U+FFFD can hold one: the rest skip the scan.)
		add(path, "must not contain an unpaired UTF-16 surrogate escape")
	}
}

// MaxSchemaRefLen bounds an event's dataschema.
const MaxSchemaRefLen = 2048

// validEventSchemaRef reports whether s can be an event's dataschema: a
// catalogue reference {schema}/{version}, or an absolute http(s) URL (the
// spec's "resolvable URI") without spaces or control characters.
func validEventSchemaRef(s string) bool {
	if _, _, ok := ParseDataSchema(s); ok {
		return true
	}
	_, ok := HTTPURL(s)
	return ok && len(s) <= MaxSchemaRefLen
}

// HTTPURL parses s as an absolute http(s) URL with a host and without
// spaces or control characters.
func HTTPURL(s string) (*url.URL, bool) {
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, false
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, false
	}
	return u, true
}

// loneSurrogate reports whether the JSON string literal raw escapes half
// of a UTF-16 surrogate pair without the other half right after it.
func loneSurrogate(raw []byte) bool {
	unit := func(i int) (rune, bool) { // the \uXXXX escape at raw[i:], if any
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := unit(i)
		if !ok {
			i++ // a two-character escape such as \\ or \"
			continue
		}
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00: // a high half: a low one must follow
			if lo, ok := unit(i + 6); !ok || lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 11
		case utf16.IsSurrogate(r): // a low half on its own
			return true
		default:
			i += 5
		}
	}
	return false
}

// SplitObject splits raw, one JSON object, into its members: keys in the
// order they first appear, keys that appear more than once (once per extra
// appearance), and raw values. A repeated key's value is its last one, as
// encoding/json and the schema validator read it.
// Errors: MALFORMED_JSON for invalid JSON, VALIDATION_FAILED at "$" for a
// JSON value that is not an object.
func SplitObject(raw []byte) (keys, dups []string, values map[string]json.RawMessage, err error) {
	obj, err := splitObject(raw)
	if err != nil {
		return nil, nil, nil, err
	}
	return obj.order, obj.dups, obj.values, nil
}

type object struct {
	order  []string
	dups   []string
	values map[string]json.RawMessage
}

// jsonString decodes a JSON string value; ok is false for any other kind.
// A string without escapes is taken as is, without a decoder.
func jsonString(raw json.RawMessage) (string, bool) {
	if !validString(raw) || len(raw) < 2 {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// splitObject reads raw as one JSON object and returns its top-level members
// without decoding them, noting duplicate keys (which encoding/json would
// silently merge) and keeping the last value of each, as encoding/json does.
// Valid JSON is split in one pass; anything else goes through the
// tokenizer, which says precisely what is wrong.
func splitObject(raw []byte) (*object, error) {
	if utf8.Valid(raw) && json.Valid(raw) {
		return splitValid(raw)
	}
	return splitSlow(raw)
}

// splitValid splits raw, known to be one valid JSON value.
func splitValid(raw []byte) (*object, error) {
	i := skipSpace(raw, 0)
	if raw[i] != '{' {
		return nil, errs.Invalid("the envelope is invalid", []errs.Violation{{Path: "$", Message: "must be a JSON object"}})
	}
	obj := &object{values: make(map[string]json.RawMessage, 8)}
	i = skipSpace(raw, i+1)
	for raw[i] != '}' {
		kend := stringEnd(raw, i)
		key, _ := jsonString(raw[i:kend])
		i = skipSpace(raw, kend)
		i = skipSpace(raw, i+1) // past ':'
		vend := valueEnd(raw, i)
		if _, seen := obj.values[key]; seen {
			obj.dups = append(obj.dups, key)
		} else {
			obj.order = append(obj.order, key)
		}
		obj.values[key] = raw[i:vend:vend]
		i = skipSpace(raw, vend)
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return obj, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string starting at b[i] == '"'.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// valueEnd returns the index just past the valid JSON value at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = stringEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j
}

// splitSlow is splitObject with the tokenizer, for input that is not valid
// JSON (or not valid UTF-8): it finds the first problem, which
// MalformedJSON describes.
func splitSlow(raw []byte) (*object, error) {
	if !utf8.Valid(raw) {
		return nil, MalformedJSON(raw)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, MalformedJSON(raw)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errs.Invalid("the envelope is invalid", []errs.Violation{{Path: "$", Message: "must be a JSON object"}})
	}
	obj := &object{values: make(map[string]json.RawMessage, 8)}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, MalformedJSON(raw)
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, MalformedJSON(raw)
		}
		if _, seen := obj.values[key]; seen {
			obj.dups = append(obj.dups, key)
		} else {
			obj.order = append(obj.order, key)
		}
		obj.values[key] = val
	}
	if _, err := dec.Token(); err != nil {
		return nil, MalformedJSON(raw)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, MalformedJSON(raw)
	}
	return obj, nil
}

// KebabCase turns a PascalCase type into its schema name: RegisterAgent →
// register-agent.
func KebabCase(typ string) string {
	var b strings.Builder
	for i, r := range typ {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

var namespace = uuid.MustParse("6f1d2a9c-3b0e-5e7a-9c41-0d7b8e2f5a13")

// CorrelationID derives the correlation id of a command from the tenant and
// the sender's (source, id) pair: the same envelope always gets the same id.
func CorrelationID(tenant, source, id string) string {
	return uuid.NewSHA1(namespace, []byte(tenant+"\x00"+source+"\x00"+id)).String()
}

// EventID derives the id of the n-th event a command caused (n from 0), so a
// redelivered command reproduces the same ids.
func EventID(correlationID string, n int, eventType string) string {
	return uuid.NewSHA1(namespace, []byte(correlationID+"\x00"+eventType+"\x00"+itoa(n))).String()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// Marshal returns the envelope's wire JSON: the fields in their order,
// data as it was received (it is always a checked JSON object).
func (e *Envelope) Marshal() []byte {
	b := make([]byte, 0, 192+len(e.ID)+len(e.Source)+len(e.DataSchema)+len(e.Data))
	b = append(b, `{"specversion":`...)
	b = appendString(b, e.SpecVersion)
	b = append(b, `,"id":`...)
	b = appendString(b, e.ID)
	b = append(b, `,"source":`...)
	b = appendString(b, e.Source)
	b = append(b, `,"type":`...)
	b = appendString(b, e.Type)
	b = append(b, `,"datacontenttype":`...)
	b = appendString(b, e.DataContentType)
	if e.DataSchema != "" {
		b = append(b, `,"dataschema":`...)
		b = appendString(b, e.DataSchema)
	}
	b = append(b, `,"time":`...)
	b = appendString(b, e.Time)
	b = append(b, `,"data":`...)
	if len(e.Data) == 0 {
		b = append(b, "{}"...)
	} else {
		b = append(b, e.Data...)
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. s is valid UTF-8 (envelope
// strings are checked); only quotes, backslashes and control characters
// need escaping.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
