package readme_test

import (
	"regexp"
	"strings"
	"testing"
)

// TestWalkthroughsUseBase: each walk-through names agentbus's address once,
// as BASE=, in the block its commands run in, and every command reaches
// agentbus as $BASE, so a reader whose agentbus listens elsewhere changes
// one line.
func TestWalkthroughsUseBase(t *testing.T) {
	secs := sections(t, readme(t))
	assign := regexp.MustCompile(`(?m)^BASE=` + regexp.QuoteMeta(readmeBase) + `(\s|$)`)
	for _, heading := range []string{walkSection, agentExampleSection, webhookSection, "## Authentication and tenants", multiSection} {
		var last string
		for _, b := range secs[heading] {
			if b.Lang == "sh" || b.Lang == "bash" {
				last = b.Text
			}
		}
		if last == "" {
			t.Errorf("README.md %q: no sh block", heading)
			continue
		}
		if n := len(assign.FindAllString(last, -1)); n != 1 {
			t.Errorf("README.md %q: its commands' block sets BASE=%s %d times, want once", heading, readmeBase, n)
		}
		for _, b := range secs[heading] {
			if b.Lang != "sh" && b.Lang != "bash" {
				continue
			}
			for i, line := range strings.Split(b.Text, "\n") {
				if strings.Contains(line, readmeBase) && !assign.MatchString(line) {
					t.Errorf("README.md %q line %d: %s is written out; use $BASE: %s", heading, b.Line+1+i, readmeBase, strings.TrimSpace(line))
				}
			}
		}
	}
	// The walk-through's second part runs in the same terminal, on the
	// same BASE.
	for _, b := range secs[agentSection] {
		if strings.Contains(b.Text, readmeBase) {
			t.Errorf("README.md %q: %s is written out; use the walk-through's $BASE", agentSection, readmeBase)
		}
	}
}
