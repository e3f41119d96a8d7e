package envelope

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/text"
)

// DecodeValue decodes data, one JSON value, as json.Decoder with UseNumber
// does (map[string]any, []any, json.Number, string, bool, nil), or reports
// false for input it does not vouch for (invalid JSON). FuzzDecodeValue
// holds the two to the same result. Schema validation uses it
// (docs/decisions.md, "Command data is decoded for validation by agentbus").
func DecodeValue(data []byte) (any, bool) {
	d := docDecoder{b: data}
	v, ok := d.value(0)
	if !ok {
		return nil, false
	}
	d.space()
	return v, d.i == len(d.b)
}

// DecodeData decodes data as DecodeValue does and checks it against the
// rules of command and event data that JSON Schema cannot state: no object
// has a member name twice, at any depth (a decoder keeps one of them, the
// stored bytes keep both), and every number is one ExactNumber accepts.
// problems lists every break of them (up to MaxDataProblems), each at its
// path under root ("$.data.items.0.qty", as the schema validator words
// paths); when there is one, doc is nil. ok is false, as for DecodeValue,
// for input it does not vouch for. Safe for concurrent use.
func DecodeData(data []byte, root string) (doc any, problems []errs.Violation, ok bool) {
	d := docDecoder{b: data, checked: true}
	v, ok := d.value(0)
	if !ok {
		return nil, nil, false
	}
	d.space()
	if d.i != len(d.b) {
		return nil, nil, false
	}
	if !d.broken {
		return v, nil, true
	}
	// Read again, following the path, to say where: paths cost only
	// when there is something to report.
	d = docDecoder{b: data, checked: true, paths: true, root: root}
	d.value(0)
	return nil, d.problems, true
}

// CheckData reports, as DecodeData does, where data breaks the data rules;
// data that is not one valid JSON value breaks them at root.
func CheckData(data []byte, root string) []errs.Violation {
	_, problems, ok := DecodeData(data, root)
	if !ok {
		return []errs.Violation{{Path: root, Message: "is not valid JSON"}}
	}
	return problems
}

// NumberProblem is the message of a number ExactNumber refuses.
const NumberProblem = "must be a number that reads back the same through a float64 (within about ±1.8e308, " +
	"not so small it reads as 0, no more digits than a float64 keeps: integers up to 2^53); send it as a string"

// MaxDataProblems caps the problems DecodeData reports.
const MaxDataProblems = 100

type docDecoder struct {
	b []byte
	i int
	// checked applies DecodeData's rules: broken is set at the first
	// break; with paths, each is reported at the path of the value being
	// read (root, then a segment per level).
	checked, broken, paths bool
	root                   string
	at                     []segment
	problems               []errs.Violation
}

// segment is a step of a path: an object member's name (isKey), or an
// array index.
type segment struct {
	key   string
	index int
	isKey bool
}

// maxSegmentLen bounds a member name quoted in a path.
const maxSegmentLen = 128

// problem records a break of a data rule at the current path.
func (d *docDecoder) problem(msg string) {
	d.broken = true
	if !d.paths || len(d.problems) >= MaxDataProblems {
		return
	}
	var b strings.Builder
	b.WriteString(d.root)
	for _, s := range d.at {
		b.WriteByte('.')
		if !s.isKey {
			b.WriteString(strconv.Itoa(s.index))
			continue
		}
		b.WriteString(text.Clip(s.key, maxSegmentLen))
	}
	d.problems = append(d.problems, errs.Violation{Path: b.String(), Message: msg})
}

// maxValueDepth bounds nesting as encoding/json does (10,000).
const maxValueDepth = 10000

func (d *docDecoder) space() { d.i = skipSpace(d.b, d.i) }

// value reads the value at d.i, inside depth arrays and objects.
func (d *docDecoder) value(depth int) (any, bool) {
	d.space()
	if d.i >= len(d.b) {
		return nil, false
	}
	switch c := d.b[d.i]; {
	case (c == '{' || c == '[') && depth >= maxValueDepth:
		return nil, false
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, false
}

func (d *docDecoder) literal(s string) bool {
	if len(d.b)-d.i < len(s) || string(d.b[d.i:d.i+len(s)]) != s {
		return false
	}
	d.i += len(s)
	return true
}

func (d *docDecoder) object(depth int) (any, bool) {
	d.i++ // {
	m := map[string]any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, true
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, false
		}
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, false
		}
		d.i++
		key := k.(string)
		if d.paths {
			d.at = append(d.at, segment{key: key, isKey: true})
		}
		if _, dup := m[key]; dup && d.checked {
			d.problem("property appears more than once")
		}
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		if d.paths {
			d.at = d.at[:len(d.at)-1]
		}
		m[key] = v // the last of a repeated key wins, as in encoding/json
		if done, ok := d.after('}'); !ok || done {
			return m, ok
		}
	}
}

// after reads what follows a member or an element: a comma (more to come)
// or the closing byte (done).
func (d *docDecoder) after(closing byte) (done, ok bool) {
	d.space()
	if d.i >= len(d.b) {
		return false, false
	}
	switch d.b[d.i] {
	case ',':
		d.i++
		return false, true
	case closing:
		d.i++
		return true, true
	}
	return false, false
}

func (d *docDecoder) array(depth int) (any, bool) {
	d.i++ // [
	a := []any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return a, true
	}
	for {
		if d.paths {
			d.at = append(d.at, segment{index: len(a)})
		}
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		if d.paths {
			d.at = d.at[:len(d.at)-1]
		}
		a = append(a, v)
		if done, ok := d.after(']'); !ok || done {
			return a, ok
		}
	}
}

// str reads a string without escapes, of valid UTF-8 and no control
// characters; anything else is decoded by encoding/json.
func (d *docDecoder) str() (any, bool) {
	start := d.i
	ascii := true
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			d.i = j + 1
			s := d.b[start+1 : j]
			if !ascii && !utf8.Valid(s) {
				return d.slowString(start)
			}
			return string(s), true
		case c == '\\':
			return d.slowString(start)
		case c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, false
}

// slowString decodes the string token starting at start with
// encoding/json (escapes, invalid UTF-8 replaced as it does).
func (d *docDecoder) slowString(start int) (any, bool) {
	end := stringEnd(d.b, start)
	var s string
	if err := json.Unmarshal(d.b[start:end], &s); err != nil { // also an unterminated string
		return nil, false
	}
	d.i = end
	return s, true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? as a
// json.Number.
func (d *docDecoder) number() (any, bool) {
	start := d.i
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.b[d.i] == '-' {
		d.i++
	}
	if d.i < len(d.b) && d.b[d.i] == '0' {
		d.i++
	} else if digits() == 0 {
		return nil, false
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return nil, false
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, false
		}
	}
	n := json.Number(d.b[start:d.i])
	if d.checked && !ExactNumber(string(n)) {
		d.problem(NumberProblem)
	}
	return n, true
}
