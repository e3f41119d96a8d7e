package ops

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// DecodeInput reads an operation call's input in the form InputSchema
// describes — the one form of transports without paths and queries (MCP
// tools, A2A skills) — into a Request's Params and Body; the caller sets
// Tenant, Caller and Valid. raw is the input's JSON text; none (empty or
// null) is {}. Each member is:
//
//   - a parameter: a string; a number or a boolean is taken as its JSON
//     text as written (1e2 stays "1e2", as a query string would carry
//     it); a repeated parameter also takes an array of those;
//   - "body", for an operation that takes a document: its JSON text, as
//     given, which the operation checks as it checks a REST body.
//
// The input outside "body" keeps the data rules (envelope.DecodeData: no
// member name twice, numbers a float64 carries exactly). Violations are
// located under root ("$" for a tool's arguments, the data part's member
// for a skill). Errors: VALIDATION_FAILED naming every problem — an input
// that is not an object, a member that is not an input of the operation,
// a value of the wrong kind, a required one missing.
func (o Operation) DecodeInput(raw json.RawMessage, root string) (*Request, error) {
	r := &Request{Params: map[string][]string{}}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		t = []byte("{}")
	}
	keys, dups, members, err := envelope.SplitObject(t)
	if err != nil {
		return nil, errs.Invalid("invalid input of "+o.ID, []errs.Violation{{Path: root, Message: "must be a JSON object"}})
	}
	var bad []errs.Violation
	for _, k := range dups {
		bad = append(bad, errs.Violation{Path: root + "." + k, Message: "property appears more than once"})
	}
	for _, name := range keys {
		v, path := members[name], root+"."+name
		if name == "body" && o.Body != nil {
			r.Body = v
			continue
		}
		i := slices.IndexFunc(o.Params, func(p Param) bool { return p.Name == name })
		if i < 0 {
			bad = append(bad, errs.Violation{Path: path, Message: "is not an input of " + o.ID})
			continue
		}
		p := o.Params[i]
		vals, ok := paramValues(v, p.Repeated)
		if !ok {
			msg := "must be a string"
			if p.Repeated {
				msg = "must be a string or an array of strings"
			}
			bad = append(bad, errs.Violation{Path: path, Message: msg})
			continue
		}
		bad = append(bad, envelope.CheckData(v, path)...)
		r.Params[name] = vals
	}
	for _, p := range o.Params {
		if _, given := members[p.Name]; p.Required && !given {
			bad = append(bad, errs.Violation{Path: root + "." + p.Name, Message: "is required"})
		}
	}
	if _, given := members["body"]; o.Body != nil && !given {
		bad = append(bad, errs.Violation{Path: root + ".body", Message: "is required"})
	}
	if len(bad) > 0 {
		slices.SortStableFunc(bad, func(a, b errs.Violation) int { return strings.Compare(a.Path, b.Path) })
		return nil, errs.Invalid("invalid input of "+o.ID, bad)
	}
	return r, nil
}

// paramValues reads a parameter's JSON value: a scalar, or, when
// repeated, an array of scalars.
func paramValues(v json.RawMessage, repeated bool) ([]string, bool) {
	if one, ok := scalarText(v); ok {
		return []string{one}, true
	}
	if !repeated {
		return nil, false
	}
	var list []json.RawMessage
	if json.Unmarshal(v, &list) != nil {
		return nil, false
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := scalarText(x)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// scalarText returns the parameter text of a JSON string (decoded), number
// (as written) or boolean.
func scalarText(v json.RawMessage) (string, bool) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "", false
	}
	switch c := v[0]; {
	case c == '"':
		var s string
		return s, json.Unmarshal(v, &s) == nil
	case c == '-' || c >= '0' && c <= '9', c == 't' || c == 'f':
		if _, ok := envelope.DecodeValue(v); !ok {
			return "", false
		}
		return string(v), true
	}
	return "", false
}
