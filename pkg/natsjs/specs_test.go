package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
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

// TestDuplicateWindowChangedOnTheStreams: applying the stream files with
// another duplicate window (as a start with another
// streams.duplicateWindow does) sets it on the streams made before.
func TestDuplicateWindowChangedOnTheStreams(t *testing.T) {
	conn := natsjstest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := natsjs.NamesFor("agentbus")
	for _, window := range []time.Duration{2 * time.Minute, 30 * time.Second} {
		specs, err := natsjs.LoadSpecs(streams.Files, natsjs.Settings{Prefix: "agentbus", DuplicateWindow: window})
		if err != nil {
			t.Fatal(err)
		}
		var mine []natsjs.Spec
		for _, sp := range specs {
			if sp.Kind == "stream" && (sp.Name == names.Commands || sp.Name == names.Events) {
				mine = append(mine, sp)
			}
		}
		if err := conn.Apply(ctx, mine, nil); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{names.Commands, names.Events} {
			s, err := conn.JS.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config.Duplicates; got != window {
				t.Errorf("%s after applying a %s window: %s", name, window, got)
			}
		}
	}
}
