package catalog_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/catalog"
)

// otherYAML adds a command type without a rule to okYAML.
const otherYAML = okYAML + `  - type: ThingDone
    version: "2.0"
    description: A thing was done, again.
`

const moreYAML = `commands:
  - type: DoThing
    version: "1.0"
    description: Does a thing.
    process:
      emits: ThingDone
  - type: DoOther
    version: "1.0"
    description: Does another thing.
events:
  - type: ThingDone
    version: "1.0"
    description: A thing was done.
`

func TestReload(t *testing.T) {
	t.Parallel()
	c, err := catalog.Load(mapFS(okFiles()))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	first := c.Current()

	t.Run("unchanged", func(t *testing.T) {
		ch, err := c.Reload(nil, mapFS(okFiles()))
		if err != nil || !ch.Empty() {
			t.Fatalf("Reload(same) = %+v, %v; want no change", ch, err)
		}
		if c.Current() != first {
			t.Fatal("an unchanged catalogue was swapped")
		}
	})

	t.Run("broken is refused", func(t *testing.T) {
		broken := with(map[string]string{cmdPath: `{"type":"object"}`}) // no examples
		if _, err := c.Reload(nil, mapFS(broken)); err == nil {
			t.Fatal("Reload of a catalogue without examples succeeded")
		}
		if c.Current() != first {
			t.Fatal("a refused catalogue replaced the current one")
		}
		if _, ok := c.Command("do-thing", "1.0"); !ok {
			t.Fatal("the old catalogue no longer answers")
		}
	})

	more := with(map[string]string{yamlPath: moreYAML, "commands/do-other/1.0.json": okSchema})
	t.Run("check refuses", func(t *testing.T) {
		no := errors.New("no")
		var seen *catalog.Snapshot
		if _, err := c.Reload(func(s *catalog.Snapshot, _ catalog.Change) error { seen = s; return no }, mapFS(more)); !errors.Is(err, no) {
			t.Fatalf("Reload = %v, want the check's error", err)
		}
		if seen == nil || len(seen.TypedCommands()) != 2 {
			t.Fatalf("check saw %v, want the new catalogue", seen)
		}
		if c.Current() != first {
			t.Fatal("a catalogue its check refused replaced the current one")
		}
	})

	t.Run("adds then removes", func(t *testing.T) {
		ch, err := c.Reload(nil, mapFS(more))
		if err != nil {
			t.Fatalf("Reload: %v", err)
		}
		if !slices.Equal(ch.Added, []string{"command DoOther 1.0"}) || len(ch.Removed)+len(ch.Changed)+len(ch.Rules) != 0 {
			t.Fatalf("change = %+v, want DoOther added", ch)
		}
		if _, ok := c.Command("do-other", "1.0"); !ok {
			t.Fatal("DoOther is not in the reloaded catalogue")
		}
		if _, ok := first.Command("do-other", "1.0"); ok {
			t.Fatal("the old snapshot changed")
		}
		ch, err = c.Reload(nil, mapFS(okFiles()))
		if err != nil {
			t.Fatalf("Reload: %v", err)
		}
		if !slices.Equal(ch.Removed, []string{"command DoOther 1.0"}) {
			t.Fatalf("change = %+v, want DoOther removed", ch)
		}
		if len(c.CommandVersions("DoOther")) != 0 {
			t.Fatal("DoOther is still in the catalogue")
		}
	})

	t.Run("rules and schemas", func(t *testing.T) {
		noRule := with(map[string]string{yamlPath: `commands:
  - type: DoThing
    version: "1.0"
    description: Does a thing.
events:
  - type: ThingDone
    version: "1.0"
    description: A thing was done.
`})
		ch, err := c.Reload(nil, mapFS(noRule))
		if err != nil {
			t.Fatalf("Reload: %v", err)
		}
		if !slices.Equal(ch.Changed, []string{"command DoThing 1.0"}) || !slices.Equal(ch.Rules, ch.Changed) {
			t.Fatalf("change = %+v, want DoThing's rule changed", ch)
		}
		stricter := with(map[string]string{cmdPath: `{"type":"object","required":["n"],"examples":[{"n":1}]}`})
		if ch, err = c.Reload(nil, mapFS(stricter)); err != nil {
			t.Fatalf("Reload: %v", err)
		}
		if !slices.Contains(ch.Changed, "command DoThing 1.0") {
			t.Fatalf("change = %+v, want DoThing's schema changed", ch)
		}
		e, _ := c.Command("do-thing", "1.0")
		if v := e.Validate([]byte(`{}`)); len(v) == 0 {
			t.Fatal("the reloaded schema is not the one validating")
		}
	})
}

// TestReloadConcurrentReaders has readers resolve commands while the
// catalogue is reloaded (run with -race): each sees one whole catalogue.
func TestReloadConcurrentReaders(t *testing.T) {
	t.Parallel()
	c, err := catalog.Load(mapFS(okFiles()))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	more := mapFS(with(map[string]string{yamlPath: moreYAML, "commands/do-other/1.0.json": okSchema}))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := c.Current()
				for _, e := range s.TypedCommands() {
					if _, ok := s.Command(e.Schema, e.Version); !ok {
						t.Errorf("%s listed but not found in the same snapshot", e.Schema)
						return
					}
				}
			}
		}()
	}
	for i := range 20 {
		dir := mapFS(okFiles())
		if i%2 == 0 {
			dir = more
		}
		if _, err := c.Reload(nil, dir); err != nil {
			t.Errorf("Reload: %v", err)
		}
	}
	close(stop)
	wg.Wait()
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	a, err := catalog.Fingerprint(mapFS(okFiles()))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := catalog.Fingerprint(mapFS(okFiles()))
	c, _ := catalog.Fingerprint(mapFS(with(map[string]string{yamlPath: otherYAML})))
	if a != b || a == c {
		t.Fatalf("fingerprints: same files %q %q, other %q", a, b, c)
	}
}

// TestFingerprintFollowsDirectoryLinks: a catalogue whose directories are
// symbolic links (as a Kubernetes volume mounts them) changes its
// fingerprint when a file behind a link changes.
func TestFingerprintFollowsDirectoryLinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	data := filepath.Join(root, "..data", "commands", "do-thing")
	cat := filepath.Join(root, "catalog")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cat, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "..data", "commands"), filepath.Join(cat, "commands")); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	if err := os.Symlink(filepath.Join(cat, "loop"), filepath.Join(cat, "loop")); err != nil {
		t.Fatal(err)
	}
	write := func(body string) string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(data, "1.0.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		fp, err := catalog.Fingerprint(os.DirFS(cat))
		if err != nil {
			t.Fatalf("Fingerprint: %v", err)
		}
		return fp
	}
	if a, b := write(okSchema), write(okSchema+" "); a == b {
		t.Fatal("a file changed behind a directory link, the fingerprint did not")
	}
}
