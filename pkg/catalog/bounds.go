package catalog

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/errs"
)

// bounds are the size limits a schema sets (maxItems, maxLength,
// maxProperties) where they apply to every instance: at the root, under
// "properties" and under a single-schema "items", not inside anyOf, $ref
// and the like. Entry.Validate checks them before the full validation, so
// a document over a bound is refused at the cost of reading it, whatever
// it holds: JSON Schema validation reports every entry of an array that
// breaks a rule, at several microseconds each, and a megabyte of short
// entries would cost seconds.
type bounds struct {
	maxItems, maxLength, maxProps int // -1: none
	props                         map[string]*bounds
	items                         *bounds
}

// maxBoundViolations caps what one check reports.
const maxBoundViolations = 100

// boundsOf returns the bounds of schema, or nil when it sets none.
func boundsOf(schema any) *bounds {
	s, ok := schema.(map[string]any)
	if !ok {
		return nil
	}
	b := &bounds{maxItems: limit(s["maxItems"]), maxLength: limit(s["maxLength"]), maxProps: limit(s["maxProperties"])}
	if props, ok := s["properties"].(map[string]any); ok {
		for name, sub := range props {
			if pb := boundsOf(sub); pb != nil {
				if b.props == nil {
					b.props = map[string]*bounds{}
				}
				b.props[name] = pb
			}
		}
	}
	b.items = boundsOf(s["items"]) // an array of schemas (tuples) is not followed
	if b.maxItems < 0 && b.maxLength < 0 && b.maxProps < 0 && b.props == nil && b.items == nil {
		return nil
	}
	return b
}

// limit reads a non-negative integer keyword, or -1.
func limit(v any) int {
	f, ok := v.(float64)
	if !ok || f < 0 || f != float64(int(f)) {
		return -1
	}
	return int(f)
}

// check reports where doc, a decoded JSON value at path, breaks a bound,
// as gojsonschema words it, up to maxBoundViolations. An array over its
// maxItems is not looked into.
func (b *bounds) check(doc any, path string, out []errs.Violation) []errs.Violation {
	if b == nil || len(out) >= maxBoundViolations {
		return out
	}
	switch v := doc.(type) {
	case string:
		if b.maxLength >= 0 && len(v) > b.maxLength && utf8.RuneCountInString(v) > b.maxLength {
			out = append(out, errs.Violation{Path: path, Message: fmt.Sprintf("String length must be less than or equal to %d", b.maxLength)})
		}
	case []any:
		if b.maxItems >= 0 && len(v) > b.maxItems {
			return append(out, errs.Violation{Path: path, Message: fmt.Sprintf("Array must have at most %d items", b.maxItems)})
		}
		if b.items != nil {
			for i, el := range v {
				if out = b.items.check(el, path+"."+strconv.Itoa(i), out); len(out) >= maxBoundViolations {
					return out
				}
			}
		}
	case map[string]any:
		if b.maxProps >= 0 && len(v) > b.maxProps {
			return append(out, errs.Violation{Path: path, Message: fmt.Sprintf("Must have at most %d properties", b.maxProps)})
		}
		for name, pb := range b.props {
			if el, ok := v[name]; ok {
				if out = pb.check(el, path+"."+name, out); len(out) >= maxBoundViolations {
					return out
				}
			}
		}
	}
	return out
}
