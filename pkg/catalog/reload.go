package catalog

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/agentbus/agentbus/pkg/envelope"
)

// Catalog is the catalogue agentbus serves: its current Snapshot, which
// Reload replaces as a whole. Every method reads the snapshot current when
// it is called, so a reader sees either the old catalogue or the new one,
// never a mix; a caller that asks several questions which must agree takes
// Current once. Safe for concurrent use.
type Catalog struct {
	cur atomic.Pointer[Snapshot]
	mu  sync.Mutex // serialises Reload
}

// Current returns the catalogue as it is now. It never changes: a reload
// puts another snapshot in its place.
func (c *Catalog) Current() *Snapshot { return c.cur.Load() }

// Reload loads dirs into a new snapshot and, when it differs from the
// current one, passes it with what it changes to check (nil: none) and,
// when check succeeds, puts it in place for every reader at once. On any
// error the current snapshot stays and the error says why; a snapshot
// that changes nothing is neither checked nor swapped. It returns what
// changed. Reloads run one at a time.
func (c *Catalog) Reload(check func(*Snapshot, Change) error, dirs ...fs.FS) (Change, error) {
	next, err := LoadSnapshot(dirs...)
	if err != nil {
		return Change{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := diff(c.Current(), next)
	if ch.Empty() {
		return ch, nil
	}
	if check != nil {
		if err := check(next, ch); err != nil {
			return Change{}, err
		}
	}
	c.cur.Store(next)
	return ch, nil
}

// Command returns the command entry for schema/version.
func (c *Catalog) Command(schema, version string) (*Entry, bool) {
	return c.Current().Command(schema, version)
}

// Event returns the event entry for schema/version.
func (c *Catalog) Event(schema, version string) (*Entry, bool) {
	return c.Current().Event(schema, version)
}

// CommandVersions returns the versions of a command type, oldest first.
func (c *Catalog) CommandVersions(typ string) []*Entry { return c.Current().CommandVersions(typ) }

// LatestEvent returns the newest version of an event type.
func (c *Catalog) LatestEvent(typ string) (*Entry, bool) { return c.Current().LatestEvent(typ) }

// Commands lists every command entry, sorted by schema then version.
func (c *Catalog) Commands() []*Entry { return c.Current().Commands() }

// Events lists every event entry, sorted by schema then version.
func (c *Catalog) Events() []*Entry { return c.Current().Events() }

// TypedCommands returns the newest entry of every command type with a
// schema, sorted by schema name.
func (c *Catalog) TypedCommands() []*Entry { return c.Current().TypedCommands() }

// ResolveCommand finds the entry a command envelope names and validates
// its data against the current catalogue (see Snapshot.ResolveCommand).
func (c *Catalog) ResolveCommand(env *envelope.Envelope) (*Entry, error) {
	return c.Current().ResolveCommand(env)
}

// Change is what a reload changed, each entry named "command PlaceOrder
// 2.0" or "event OrderPlaced 1.0", sorted.
type Change struct {
	Added, Removed []string
	// Changed entries have another schema, description or rule.
	Changed []string
	// Rules lists the command entries whose rule was added, removed or
	// changed (they are in Added, Removed or Changed too).
	Rules []string
	// Schemas lists the entries that stay with another schema document
	// (they are in Changed too).
	Schemas []string
}

// Empty reports whether nothing changed.
func (c Change) Empty() bool { return len(c.Added)+len(c.Removed)+len(c.Changed) == 0 }

// diff returns what changes from old to next.
func diff(old, next *Snapshot) Change {
	var ch Change
	name := func(e *Entry) string { return fmt.Sprintf("%s %s %s", e.Kind, e.Type, e.Version) }
	for _, kind := range []Kind{KindCommand, KindEvent} {
		before, after := old.table(kind), next.table(kind)
		for k, e := range after {
			o, ok := before[k]
			switch {
			case !ok:
				ch.Added = append(ch.Added, name(e))
				if e.Rule != nil {
					ch.Rules = append(ch.Rules, name(e))
				}
			case !bytes.Equal(o.Doc, e.Doc) || o.Description != e.Description || o.Type != e.Type || !sameRule(o.Rule, e.Rule):
				ch.Changed = append(ch.Changed, name(e))
				if !bytes.Equal(o.Doc, e.Doc) {
					ch.Schemas = append(ch.Schemas, name(e))
				}
				if !sameRule(o.Rule, e.Rule) {
					ch.Rules = append(ch.Rules, name(e))
				}
			}
		}
		for k, o := range before {
			if _, ok := after[k]; !ok {
				ch.Removed = append(ch.Removed, name(o))
				if o.Rule != nil {
					ch.Rules = append(ch.Rules, name(o))
				}
			}
		}
	}
	for _, l := range [][]string{ch.Added, ch.Removed, ch.Changed, ch.Rules, ch.Schemas} {
		sort.Strings(l)
	}
	return ch
}

func (c *Snapshot) table(k Kind) map[string]*Entry {
	if k == KindEvent {
		return c.events
	}
	return c.commands
}

func sameRule(a, b *Rule) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// Fingerprint returns a digest of every entry under dirs (names, and for
// regular files their size and modification time; nothing is read),
// following symbolic links to directories (a Kubernetes volume links its
// files through them): it changes when any of them does, so that a poll
// reloads only then. What cannot be read is noted, not fatal; it fails
// only for directory links nested too deep.
func Fingerprint(dirs ...fs.FS) (string, error) {
	h := sha256.New()
	for i, dir := range dirs {
		if err := hashTree(h, dir, ".", i, 0); err != nil {
			return "", fmt.Errorf("catalog: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// maxLinkDepth bounds the symbolic links to directories followed inside
// one another (a link to a parent would loop).
const maxLinkDepth = 8

func hashTree(h io.Writer, dir fs.FS, root string, i, depth int) error {
	return fs.WalkDir(dir, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// Unreadable (a lost+found of another owner, say): noted, not
			// fatal; a load reads it only if the catalogue names it.
			fmt.Fprintf(h, "%d\x00%s\x00unreadable\x00", i, p)
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		st, err := fs.Stat(dir, p) // through a link
		if err != nil {
			fmt.Fprintf(h, "%d\x00%s\x00broken link\x00", i, p)
			return nil
		}
		if st.IsDir() { // a link to a directory
			if depth >= maxLinkDepth {
				return fmt.Errorf("%s: directory links nested more than %d deep", p, maxLinkDepth)
			}
			return hashTree(h, dir, p, i, depth+1)
		}
		if !st.Mode().IsRegular() {
			// A pipe, a socket, a device: never read (a pipe would block).
			fmt.Fprintf(h, "%d\x00%s\x00%s\x00", i, p, st.Mode().Type())
			return nil
		}
		// Name, size and time of the last change: enough to see a change,
		// without reading what may be large.
		fmt.Fprintf(h, "%d\x00%s\x00%d\x00%d\x00", i, p, st.Size(), st.ModTime().UnixNano())
		return nil
	})
}
