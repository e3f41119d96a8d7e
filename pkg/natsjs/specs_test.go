package natsjs_test

import (
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/streams"
)

// TestStreamMaxAges: the command and synthetic streams age out after
// their settings; the event stream never does, whatever they are (the
// registries are replayed from it).
func TestStreamMaxAges(t *testing.T) {
	specs, err := natsjs.LoadSpecs(streams.Files, natsjs.Settings{
		Prefix: "agentbus", CommandMaxAge: 48 * time.Hour, SyntheticMaxAge: 24 * time.Hour,
		DuplicateWindow: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	names := natsjs.NamesFor("agentbus")
	want := map[string]time.Duration{names.Commands: 48 * time.Hour, names.Synthetic: 24 * time.Hour, names.Events: 0}
	for _, sp := range specs {
		if age, ok := want[sp.Name]; ok && sp.Kind == "stream" {
			if got := time.Duration(sp.MaxAge); got != age {
				t.Errorf("%s: max age %s, want %s", sp.Name, got, age)
			}
			delete(want, sp.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("streams not in the files: %v", want)
	}
}
