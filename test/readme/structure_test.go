package readme_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestReadmeStructure: the README keeps what a user and an operator need,
// with the newcomer's path (quick start, walk-through) first; the
// performance history, the decisions log and the architecture live in
// test/bench/README.md, docs/decisions.md and docs/architecture.md, which
// it links to (the architecture before the quick start).
func TestReadmeStructure(t *testing.T) {
	text := readme(t)
	lines := strings.Split(text, "\n")
	if len(lines) > 800 {
		t.Errorf("README.md has %d lines; keep it under 800 (history and measurements belong in test/bench/README.md and docs/decisions.md, depth in docs/)", len(lines))
	}
	for _, h := range []string{
		"## Quick start", "## Walk-through", "## Connecting clients", "## Configuration",
		"## The NATS subject contract", "## Running against a NATS cluster", "## Limits", "## Performance",
	} {
		sectionText(t, text, h) // fails t when missing
	}
	for _, h := range []string{"## Quick start", "## Walk-through"} {
		if i := indexOfLine(lines, h); i < 0 || i >= 90 {
			t.Errorf("README.md: %q starts at line %d; the newcomer's path is the first 90 lines", h, i+1)
		}
	}
	if p := sectionText(t, text, "## Performance"); strings.Count(p, "\n") > 20 {
		t.Errorf("README.md's Performance section should summarise and link test/bench/README.md, not hold its history:\n%s", p)
	}
	if d := sectionText(t, text, "## Decisions"); strings.Count(d, "\n") > 6 || !strings.Contains(d, "(docs/decisions.md)") {
		t.Errorf("README.md's Decisions section should only point to docs/decisions.md:\n%s", d)
	}
	for _, link := range []string{"(docs/decisions.md)", "(test/bench/README.md"} {
		if !strings.Contains(text, link) {
			t.Errorf("README.md does not link %s", strings.Trim(link, "()"))
		}
	}
	if i, q := strings.Index(text, "(docs/architecture.md)"), strings.Index(text, "\n## Quick start\n"); i < 0 || i > q {
		t.Errorf("README.md should link docs/architecture.md before its quick start")
	}
	if strings.Contains(text, "\n## Layout\n") {
		t.Errorf("README.md has a Layout section; the rooms and their rule live in docs/architecture.md")
	}

	decisions, err := os.ReadFile(filepath.Join(repoRoot, "docs/decisions.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(decisions), "\n- **"); !strings.HasPrefix(string(decisions), "# Decisions\n") || n < 15 {
		t.Errorf("docs/decisions.md: want the decisions log under \"# Decisions\", found %d decisions", n)
	}
	bench, err := os.ReadFile(filepath.Join(repoRoot, "test/bench/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	summary := sectionText(t, string(bench), "## Summary")
	if !strings.Contains(summary, "| figure | measured | target |") {
		t.Errorf("test/bench/README.md's Summary lacks the table of figures the README had:\n%s", summary)
	}
}

// TestArchitecture: docs/architecture.md has the flow (with its diagram),
// a command's way, the rooms and the rule, and names every package under
// pkg/ (a nested one at least by its name, beside its parent), so a room
// added without a word in the picture fails here.
func TestArchitecture(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs/architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, h := range []string{"## The flow", "## A command's way", "## The rooms", "## The rule"} {
		sectionText(t, doc, h) // fails t when missing
	}
	if !strings.Contains(sectionText(t, doc, "## The flow"), "```") {
		t.Error("docs/architecture.md: The flow has no diagram")
	}
	rooms := sectionText(t, doc, "## The rooms")
	root := filepath.Join(repoRoot, "pkg")
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() == "testdata" || d.Name() == "node_modules" {
			return err
		}
		code, _ := filepath.Glob(filepath.Join(path, "*.go"))
		code = slices.DeleteFunc(code, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
		if len(code) == 0 {
			return nil
		}
		rel, _ := filepath.Rel(repoRoot, path)
		rel = filepath.ToSlash(rel)
		parent := filepath.ToSlash(filepath.Dir(rel))
		named := strings.Contains(rooms, "`"+rel+"`") ||
			(parent != "pkg" && strings.Contains(rooms, "`"+parent+"`") && strings.Contains(rooms, "`"+d.Name()+"`"))
		if !named {
			t.Errorf("docs/architecture.md: The rooms does not name %s", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDocLinks: every relative link of the README, of the documents its
// sections moved to and of docs/webhooks.md (which its walk-through leans
// on) names a file that exists, and a #fragment a heading of that file.
func TestDocLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, doc := range []string{"README.md", "docs/decisions.md", "docs/architecture.md", "test/bench/README.md", "docs/webhooks.md"} {
		path := filepath.Join(repoRoot, doc)
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(withoutCode(string(raw)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), file)
			}
			info, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s links %s: %v", doc, target, err)
				continue
			}
			if frag == "" || info.IsDir() || !strings.HasSuffix(dest, ".md") {
				continue
			}
			body, err := os.ReadFile(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !hasAnchor(string(body), frag) {
				t.Errorf("%s links %s: %s has no heading #%s", doc, target, file, frag)
			}
		}
	}
}

// withoutCode returns markdown without its fenced code blocks.
func withoutCode(md string) string {
	var out []string
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// hasAnchor reports whether a heading of md has the GitHub anchor frag:
// lower case, spaces to hyphens, other punctuation dropped.
func hasAnchor(md, frag string) bool {
	for _, line := range strings.Split(withoutCode(md), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		if b.String() == frag {
			return true
		}
	}
	return false
}

func indexOfLine(lines []string, line string) int {
	for i, l := range lines {
		if l == line {
			return i
		}
	}
	return -1
}
