package text_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/text"
)

// TestCut: a cut keeps at most n bytes and never ends inside a character
// of one to four bytes; bytes that encode none are kept like characters,
// so a cut through invalid input still keeps up to n bytes.
func TestCut(t *testing.T) {
	for name, c := range map[string]struct {
		s    string
		n    int
		want string
	}{
		"shorter":                   {"abc", 5, "abc"},
		"exact":                     {"abc", 3, "abc"},
		"ascii":                     {"abcdef", 4, "abcd"},
		"zero":                      {"abc", 0, ""},
		"negative":                  {"abc", -1, ""},
		"empty":                     {"", 3, ""},
		"two bytes, whole":          {"aé", 3, "aé"},
		"two bytes, split":          {"aéb", 2, "a"},
		"three bytes, after first":  {"a€b", 2, "a"},
		"three bytes, after second": {"a€b", 3, "a"},
		"three bytes, whole":        {"a€b", 4, "a€"},
		"four bytes, after first":   {"a😀b", 2, "a"},
		"four bytes, after third":   {"a😀b", 4, "a"},
		"four bytes, whole":         {"a😀b", 5, "a😀"},
		"only a multi-byte":         {"😀", 3, ""},
		"boundary before multi":     {"ab😀", 2, "ab"},
		"replacement character":     {"a\uFFFDb", 2, "a"},
		"continuation bytes only":   {strings.Repeat("\x80", 10), 4, strings.Repeat("\x80", 4)},
		"invalid lead byte":         {"a\xffbc", 2, "a\xff"},
		"incomplete sequence":       {"a\xe2\x82bc", 3, "a\xe2\x82"},
		"bad byte then character":   {"\xff€", 2, "\xff"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := text.Cut(c.s, c.n); got != c.want {
				t.Errorf("Cut(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
			}
			if got := string(text.Cut([]byte(c.s), c.n)); got != c.want {
				t.Errorf("Cut([]byte(%q), %d) = %q, want %q", c.s, c.n, got, c.want)
			}
		})
	}
}

// TestCutKeepsValidTextValid: every cut of valid UTF-8 is valid UTF-8, a
// prefix of it, at most n bytes, and at most utf8.UTFMax-1 bytes short.
func TestCutKeepsValidTextValid(t *testing.T) {
	s := "aé€😀b\u00ffz日本語"
	for n := 0; n <= len(s)+1; n++ {
		got := text.Cut(s, n)
		if !utf8.ValidString(got) || !strings.HasPrefix(s, got) || len(got) > n || len(got) < min(n, len(s))-(utf8.UTFMax-1) {
			t.Errorf("Cut(%q, %d) = %q", s, n, got)
		}
	}
}

// TestClip: a string within n is kept; a longer one is cut and marked.
func TestClip(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"aéb", 2, "a…"},
		{"😀😀", 5, "😀…"},
	} {
		if got := text.Clip(c.s, c.n); got != c.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
