package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/agentbus/agentbus/config"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/pkg/transport/mcp"
)

// catalogDirs returns the built-in catalogue and the configured directories
// (or the embedded example catalogue when none is configured).
func catalogDirs(cfg settings.Config) ([]fs.FS, error) {
	dirs := []fs.FS{catalog.BuiltinWith(catalog.BuiltinLimits{Types: cfg.Quotas.RegistrationTypes})}
	if len(cfg.Catalog.Dirs) == 0 {
		dirs = append(dirs, config.ExampleCatalog())
	}
	for _, d := range cfg.Catalog.Dirs {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("catalog directory %q does not exist", d)
		}
		dirs = append(dirs, os.DirFS(d))
	}
	return dirs, nil
}

// catalogReload is what a catalogue reload changes besides the catalogue:
// the MCP tools. Which types the processor takes, and so its consumer's
// filter, is settled at start.
type catalogReload struct {
	cfg settings.Config
	cat *catalog.Catalog
	mcp *mcp.Transport
	log *slog.Logger

	mu      sync.Mutex // serialises reloads; guards files and stopped
	files   string     // fingerprint of the directories last tried
	stopped bool       // Stop has begun: no more reloads
}

// ReloadCatalog loads the catalogue directories again and, when they load
// and the MCP tools can be built from them, puts the new catalogue in
// place for every request at once: validation, the schemas served, the
// catalogue operations, the MCP typed tools (open sessions are told
// notifications/tools/list_changed) and the A2A card's skills. A catalogue that does not
// load, that changes a rule (which command types agentbus processes, and
// how, is settled at start) or a published version's schema, or whose
// typed tools the MCP SDK refuses, is refused, logged, and returned as
// the error; the current one stays. Safe for concurrent use; reloads run
// one at a time, and none once Stop has begun.
func (s *Server) ReloadCatalog(ctx context.Context) error { return s.reload(ctx, false) }

// ReloadCatalogIfChanged reloads the catalogue (ReloadCatalog) only when a
// file of its directories changed since the last reload tried: what a
// poll calls. A catalogue refused is refused once, not at every poll.
func (s *Server) ReloadCatalogIfChanged(ctx context.Context) error { return s.reload(ctx, true) }

func (s *Server) reload(ctx context.Context, onlyChanged bool) error {
	r := s.catalog
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return errors.New("agentbus is stopping: the catalogue is not reloaded")
	}
	dirs, err := catalogDirs(r.cfg)
	if err != nil {
		r.log.Error("catalogue not reloaded: the current one stays", "err", err)
		return err
	}
	files, err := catalog.Fingerprint(dirs...)
	if err != nil {
		r.log.Error("catalogue not reloaded: the current one stays", "err", err)
		return err
	}
	if onlyChanged && files == r.files {
		return nil
	}
	r.files = files
	ch, err := r.cat.Reload(func(next *catalog.Snapshot, ch catalog.Change) error {
		if err := reloadable(ch); err != nil {
			return err
		}
		return r.mcp.CheckCatalog(next)
	}, dirs...)
	if err != nil {
		r.log.Error("catalogue not reloaded: the current one stays", "err", err)
		return err
	}
	if ch.Empty() {
		r.log.Info("catalogue reloaded: nothing changed")
		return nil
	}
	if err := r.mcp.CatalogChanged(); err != nil { // checked above: not expected
		r.log.Error("catalogue reloaded, but the MCP tools could not follow it", "err", err)
	}
	r.log.Info("catalogue reloaded", "added", ch.Added, "removed", ch.Removed, "changed", ch.Changed)
	return nil
}

// reloadable refuses what a running agentbus cannot take on: a rule added,
// changed or taken away (which command types agentbus processes, and how,
// is settled at start for every replica sharing the processor consumer;
// a command accepted under one rule must be processed under it), and an
// existing version's schema edited (a command accepted against it may be
// processed against the new one; a schema version is published once: add
// a version instead).
func reloadable(ch catalog.Change) error {
	if len(ch.Rules) > 0 {
		return fmt.Errorf("the rules of %s changed: rules change at a restart (restart every replica with the new catalogue)", strings.Join(ch.Rules, ", "))
	}
	if len(ch.Schemas) > 0 {
		return fmt.Errorf("the schema of %s changed: a published version does not change; add a new version", strings.Join(ch.Schemas, ", "))
	}
	return nil
}
