package envelope

import (
	"slices"
	"testing"
)

// TestSplitRepeatedKeyLastWins: a repeated key keeps its last value, as
// encoding/json and the schema validator read it, in both the one-pass
// splitter and the tokenizer; the key is listed once, where it first
// appears, and reported once per extra appearance.
func TestSplitRepeatedKeyLastWins(t *testing.T) {
	raw := []byte(`{"id":"first","n":1,"id":{"x":"mid"},"\u0069d":"last"}`)
	splitters := map[string]func([]byte) (*object, error){
		"SplitObject": func(b []byte) (*object, error) {
			keys, dups, values, err := SplitObject(b)
			return &object{order: keys, dups: dups, values: values}, err
		},
		"splitValid": splitValid,
		"splitSlow":  splitSlow,
	}
	for name, split := range splitters {
		t.Run(name, func(t *testing.T) {
			obj, err := split(raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(obj.values["id"]); got != `"last"` {
				t.Errorf("id = %s, want the last value", got)
			}
			if got := string(obj.values["n"]); got != `1` {
				t.Errorf("n = %s, want 1", got)
			}
			if !slices.Equal(obj.order, []string{"id", "n"}) || !slices.Equal(obj.dups, []string{"id", "id"}) {
				t.Errorf("order %q, dups %q; want [id n], [id id]", obj.order, obj.dups)
			}
		})
	}
}
