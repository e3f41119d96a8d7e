package strict_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/settings/strict"
)

// level is a setting whose type refuses some values, as a duration does.
type level string

func (l *level) UnmarshalJSON(b []byte) error {
	if s := strings.Trim(string(b), `"`); s == "low" || s == "high" {
		*l = level(s)
		return nil
	}
	return errors.New("invalid level " + string(b))
}

type inner struct {
	Count int   `json:"count"`
	Level level `json:"level"`
}

type doc struct {
	Name  string  `json:"name"`
	Inner inner   `json:"inner"`
	List  []inner `json:"list"`
}

// TestDecode: a document is merged over the value; each mistake is named
// by its key, in the struct's own words, and the range of a number is the
// caller's.
func TestDecode(t *testing.T) {
	t.Parallel()
	allowed := func(key string) string {
		if key == "inner.count" {
			return "must be 1 to 10"
		}
		return ""
	}
	for body, want := range map[string]string{
		"name: a\ninner:\n  count: 3\n  level: low\n": "",
		"nmae: a\n":                             `key "nmae" is not a setting`,
		"inner:\n  Count: 3\n":                  `key "inner.Count": did you mean "count"? (keys are case-sensitive)`,
		"inner:\n  count: many\n":               "inner.count must be an integer, not a string; it must be 1 to 10",
		"inner:\n  level: middling\n":           `inner.level: invalid level "middling"`,
		"list:\n  - level: low\n  - level: x\n": `list[1].level: invalid level "x"`,
		"name: [\n":                             "yaml: line",
	} {
		v := doc{Name: "kept"}
		err := strict.Decode([]byte(body), &v, allowed)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", body, err)
		case want == "":
			if v.Name != "a" || v.Inner.Count != 3 || v.Inner.Level != "low" {
				t.Errorf("%q decoded as %+v", body, v)
			}
		case err == nil || !strings.Contains(err.Error(), want):
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}
