package catalog

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/text"
)

// checkRefs refuses what the validator would not survive or should not
// do: a $ref that is not local to the document (gojsonschema would fetch
// it over HTTP or from a file, without a timeout, while loading), a $ref
// to nothing, and a cycle of $ref, allOf, anyOf, oneOf, not, if, then, else
// or dependencies that comes back to a schema without descending into a
// property or an item: validating any instance against it would recurse
// without end and crash the process (a Go stack overflow cannot be
// recovered). Recursion through properties or items is fine: it ends with
// the instance.
func checkRefs(tree any) error {
	nodes := map[string]map[string]any{}
	var walk func(ptr string, v any)
	walk = func(ptr string, v any) {
		switch x := v.(type) {
		case map[string]any:
			nodes[ptr] = x
			for k, c := range x {
				walk(ptr+"/"+escapePointer(k), c)
			}
		case []any:
			for i, c := range x {
				walk(ptr+"/"+strconv.Itoa(i), c)
			}
		}
	}
	walk("", tree)
	// Edges between schemas that apply to the same instance.
	edges := map[string][]string{}
	ptrs := make([]string, 0, len(nodes))
	for ptr := range nodes {
		ptrs = append(ptrs, ptr)
	}
	sort.Strings(ptrs)
	for _, ptr := range ptrs {
		n := nodes[ptr]
		if ref, ok := n["$ref"]; ok {
			s, ok := ref.(string)
			if !ok {
				return fmt.Errorf("%s: $ref must be a string", at(ptr))
			}
			if !strings.HasPrefix(s, "#") {
				return fmt.Errorf("%s: $ref %q is not local to the schema (only #… references are allowed)", at(ptr), clipRef(s))
			}
			target, err := url.PathUnescape(strings.TrimPrefix(s, "#"))
			if err != nil || (target != "" && !strings.HasPrefix(target, "/")) {
				return fmt.Errorf("%s: $ref %q is not a JSON pointer (#/…)", at(ptr), clipRef(s))
			}
			if _, ok := nodes[target]; !ok {
				return fmt.Errorf("%s: $ref %q names no schema of the document", at(ptr), clipRef(s))
			}
			edges[ptr] = append(edges[ptr], target)
		}
		for _, k := range []string{"not", "if", "then", "else"} {
			if _, ok := n[k].(map[string]any); ok {
				edges[ptr] = append(edges[ptr], ptr+"/"+k)
			}
		}
		for _, k := range []string{"allOf", "anyOf", "oneOf"} {
			if list, ok := n[k].([]any); ok {
				for i := range list {
					edges[ptr] = append(edges[ptr], ptr+"/"+k+"/"+strconv.Itoa(i))
				}
			}
		}
		if deps, ok := n["dependencies"].(map[string]any); ok {
			for name, d := range deps {
				if _, ok := d.(map[string]any); ok {
					edges[ptr] = append(edges[ptr], ptr+"/dependencies/"+escapePointer(name))
				}
			}
		}
	}
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var visit func(ptr string) error
	visit = func(ptr string) error {
		switch state[ptr] {
		case open:
			return fmt.Errorf("%s: a cycle of $ref (or allOf, anyOf, oneOf, not, if/then/else) that never descends into a property or an item", at(ptr))
		case done:
			return nil
		}
		state[ptr] = open
		for _, next := range edges[ptr] {
			if _, ok := nodes[next]; !ok {
				continue
			}
			if err := visit(next); err != nil {
				return err
			}
		}
		state[ptr] = done
		return nil
	}
	for _, ptr := range ptrs {
		if err := visit(ptr); err != nil {
			return err
		}
	}
	return nil
}

// escapePointer escapes a JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// at names a JSON pointer in an error ("#" for the root).
func at(ptr string) string { return "#" + ptr }

// clipRef bounds a $ref an error quotes.
func clipRef(s string) string { return text.Clip(s, 128) }
