package query_test

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/query"
)

// offlineApp is a Reader with no storage, for the parts that need none.
func offlineApp(t *testing.T, cfg query.Config) *query.Reader {
	t.Helper()
	return query.New(cfg, query.Ports{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestParseEventQuery(t *testing.T) {
	t.Parallel()
	a := offlineApp(t, query.Config{})
	corr := "6f1d2a9c-3b0e-5e7a-9c41-0d7b8e2f5a13"
	c42 := a.Cursor("acme", false, 42)
	tests := []struct {
		name               string
		types              []string
		corr, after, limit string
		synthetic          string
		want               query.EventQuery
		bad                []string // violation paths, sorted; nil = valid
	}{
		{name: "empty gets the default page", want: query.EventQuery{Limit: 100}},
		{name: "one type", types: []string{"OrderPlaced"}, want: query.EventQuery{Types: []string{"OrderPlaced"}, Limit: 100}},
		{name: "two types", types: []string{"OrderPlaced", "NoteAdded"}, want: query.EventQuery{Types: []string{"OrderPlaced", "NoteAdded"}, Limit: 100}},
		{name: "everything", types: []string{"A"}, corr: corr, after: c42, limit: "7",
			want: query.EventQuery{Types: []string{"A"}, CorrelationID: corr, After: c42, Limit: 7}},
		{name: "limit 1", limit: "1", want: query.EventQuery{Limit: 1}},
		{name: "limit max", limit: "1000", want: query.EventQuery{Limit: 1000}},
		{name: "after 0", after: "0", want: query.EventQuery{After: "0", Limit: 100}},
		{name: "after of injected events", after: a.Cursor("acme", true, 42), synthetic: "true",
			want: query.EventQuery{After: a.Cursor("acme", true, 42), Synthetic: true, Limit: 100}},
		{name: "after a number", after: "42", bad: []string{"after"}},
		{name: "after of another tenant", after: a.Cursor("globex", false, 42), bad: []string{"after"}},
		{name: "after of injected events on the log", after: a.Cursor("acme", true, 42), bad: []string{"after"}},
		{name: "after of the log on injected events", after: c42, synthetic: "true", bad: []string{"after"}},
		{name: "after of another key", after: offlineApp(t, query.Config{}).Cursor("acme", false, 42), bad: []string{"after"}},
		{name: "after changed", after: flip(c42, 3), bad: []string{"after"}},
		{name: "after spelt otherwise", after: respell(c42), bad: []string{"after"}},
		{name: "after cut", after: c42[:21], bad: []string{"after"}},
		{name: "after padded", after: c42 + "==", bad: []string{"after"}},
		{name: "limit 0", limit: "0", bad: []string{"limit"}},
		{name: "limit negative", limit: "-1", bad: []string{"limit"}},
		{name: "limit over max", limit: "1001", bad: []string{"limit"}},
		{name: "limit words", limit: "abc", bad: []string{"limit"}},
		{name: "limit float", limit: "1.5", bad: []string{"limit"}},
		{name: "limit huge", limit: "99999999999999999999", bad: []string{"limit"}},
		{name: "after words", after: "abc", bad: []string{"after"}},
		{name: "after negative", after: "-1", bad: []string{"after"}},
		{name: "after overflow", after: "18446744073709551616", bad: []string{"after"}},
		{name: "type camelCase", types: []string{"orderPlaced"}, bad: []string{"type"}},
		{name: "type wildcard", types: []string{"*"}, bad: []string{"type"}},
		{name: "type subject injection", types: []string{"A.>"}, bad: []string{"type"}},
		{name: "type empty", types: []string{""}, bad: []string{"type"}},
		{name: "one good one bad type", types: []string{"OrderPlaced", "x"}, bad: []string{"type"}},
		{name: "correlationId with dot", corr: "a.b", bad: []string{"correlationId"}},
		{name: "correlationId wildcard", corr: ">", bad: []string{"correlationId"}},
		{name: "correlationId too long", corr: strings.Repeat("a", 129), bad: []string{"correlationId"}},
		{name: "all bad at once", types: []string{"x"}, corr: "a b", after: "z", limit: "0", synthetic: "yes",
			bad: []string{"after", "correlationId", "limit", "synthetic", "type"}},
		{name: "synthetic", synthetic: "true", want: query.EventQuery{Synthetic: true, Limit: 100}},
		{name: "synthetic false", synthetic: "false", want: query.EventQuery{Limit: 100}},
		{name: "synthetic words", synthetic: "1", bad: []string{"synthetic"}},
		{name: "synthetic with correlationId", synthetic: "true", corr: corr, bad: []string{"correlationId"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q, err := a.ParseEventQuery("acme", tt.types, tt.corr, tt.after, tt.limit, tt.synthetic)
			if tt.bad == nil {
				if err != nil {
					t.Fatalf("ParseEventQuery: %v", err)
				}
				if !slices.Equal(q.Types, tt.want.Types) || q.CorrelationID != tt.want.CorrelationID ||
					q.After != tt.want.After || q.Limit != tt.want.Limit || q.Synthetic != tt.want.Synthetic {
					t.Errorf("ParseEventQuery = %+v, want %+v", q, tt.want)
				}
				return
			}
			e := errs.As(err)
			if err == nil || e.Code != errs.CodeValidationFailed {
				t.Fatalf("err = %v, want VALIDATION_FAILED", err)
			}
			var paths []string
			for _, v := range e.Violations {
				paths = append(paths, v.Path)
			}
			slices.Sort(paths)
			if !slices.Equal(paths, tt.bad) {
				t.Errorf("violation paths = %q, want %q", paths, tt.bad)
			}
		})
	}
}

func TestParseEventQueryConfiguredPage(t *testing.T) {
	t.Parallel()
	a := offlineApp(t, query.Config{PageDefault: 5, PageMax: 10})
	q, err := a.ParseEventQuery("acme", nil, "", "", "", "")
	if err != nil || q.Limit != 5 {
		t.Errorf("default limit = %d, %v; want 5", q.Limit, err)
	}
	if _, err := a.ParseEventQuery("acme", nil, "", "", "10", ""); err != nil {
		t.Errorf("limit 10: %v", err)
	}
	if _, err := a.ParseEventQuery("acme", nil, "", "", "11", ""); errs.CodeOf(err) != errs.CodeValidationFailed {
		t.Errorf("limit 11 over a max of 10: %v", err)
	}
}

// flip returns cursor with its i-th character replaced by another of the
// base64url alphabet.
func flip(cursor string, i int) string {
	b := []byte(cursor)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// respell returns cursor with the unused low bits of its last character
// set: the same bytes to a lenient base64 decoder.
func respell(cursor string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, cursor[len(cursor)-1])
	return cursor[:len(cursor)-1] + string(alphabet[last|0x0f])
}

// TestCursors: a position formats to one cursor, which reads back as that
// position for its tenant and log only; 0 is "0"; the cursors of
// consecutive positions share nothing visible (no common prefix, the same
// length), so their distance cannot be read from them; and two Readers on
// one key (two replicas, a restart) read each other's cursors.
func TestCursors(t *testing.T) {
	t.Parallel()
	key := []byte("a-cursor-key-of-thirty-two-bytes")
	a, b := offlineApp(t, query.Config{CursorKey: key}), offlineApp(t, query.Config{CursorKey: key})
	if got := a.Cursor("acme", false, 0); got != "0" {
		t.Fatalf("the start's cursor is %q, want 0", got)
	}
	for _, seq := range []uint64{0, 1, 2, 3, 1000, 1 << 40, 1<<63 - 1} {
		c := a.Cursor("acme", false, seq)
		if c != a.Cursor("acme", false, seq) {
			t.Fatalf("position %d formats to two cursors", seq)
		}
		if got, err := b.CursorSeq("acme", false, c); err != nil || got != seq {
			t.Fatalf("another Reader on the key reads %q as %d, %v; want %d", c, got, err, seq)
		}
		if _, err := a.CursorSeq("globex", false, c); seq != 0 && !errors.Is(err, query.ErrBadCursor) {
			t.Fatalf("another tenant reads the cursor of %d: %v", seq, err)
		}
		if seq != 0 && strings.Contains(c, strconv.FormatUint(seq, 10)) && len(strconv.FormatUint(seq, 10)) > 3 {
			t.Fatalf("the cursor %q of %d shows it", c, seq)
		}
	}
	prev := a.Cursor("acme", false, 1)
	for seq := uint64(2); seq < 200; seq++ {
		c := a.Cursor("acme", false, seq)
		if len(c) != len(prev) || c[:4] == prev[:4] {
			t.Fatalf("the cursors of %d and %d look alike: %q, %q", seq-1, seq, prev, c)
		}
		prev = c
	}
}
