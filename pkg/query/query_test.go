package query_test

import (
	"io"
	"log/slog"
	"slices"
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
		{name: "everything", types: []string{"A"}, corr: corr, after: "42", limit: "7",
			want: query.EventQuery{Types: []string{"A"}, CorrelationID: corr, After: "42", Limit: 7}},
		{name: "limit 1", limit: "1", want: query.EventQuery{Limit: 1}},
		{name: "limit max", limit: "1000", want: query.EventQuery{Limit: 1000}},
		{name: "after 0", after: "0", want: query.EventQuery{After: "0", Limit: 100}},
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
			q, err := a.ParseEventQuery(tt.types, tt.corr, tt.after, tt.limit, tt.synthetic)
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
	q, err := a.ParseEventQuery(nil, "", "", "", "")
	if err != nil || q.Limit != 5 {
		t.Errorf("default limit = %d, %v; want 5", q.Limit, err)
	}
	if _, err := a.ParseEventQuery(nil, "", "", "10", ""); err != nil {
		t.Errorf("limit 10: %v", err)
	}
	if _, err := a.ParseEventQuery(nil, "", "", "11", ""); errs.CodeOf(err) != errs.CodeValidationFailed {
		t.Errorf("limit 11 over a max of 10: %v", err)
	}
}
