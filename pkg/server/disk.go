package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/localstore"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/settings"
)

// DiskDir is where, under the data directory, the replica keeps its read
// models on disk.
const DiskDir = "index"

// CopiesDir is where, under the data directory, the replica keeps its
// copies of the events (projection.EventCopies): a store of their own,
// whose keys all come in the log's order, so that its compactions move
// tables rather than rewrite them and the read models' lookups do not go
// through its tables.
const CopiesDir = "events"

// openDisks opens the replica's stores on disk: its read models' in
// <data>/index, and its copies of the events' in <data>/events with half
// of memory.index (at least localstore's least) when withCopies, nil
// otherwise. A store that holds more of a log than the log has (written
// for another log, or kept across a restore from an older backup) is
// emptied: what it held is made again from the logs.
func openDisks(ctx context.Context, cfg settings.Config, st *stores, subj bus.Subjects, withCopies bool, log *slog.Logger) (disk, copies *localstore.Store, err error) {
	commands, err := st.commands.LastSeq(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("the read models on disk: %w", err)
	}
	events, err := st.events.LastSeq(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("the read models on disk: %w", err)
	}
	disk, err = openStore(filepath.Join(cfg.Data, DiskDir), "the read models on disk", cfg.Memory.IndexBytes(), localstore.MostlyAbsent, projection.ScannedOnly, log,
		func(d *localstore.Store) error { return projection.ForgetOtherLogs(d, subj, commands, events, log) })
	if err != nil || !withCopies {
		return disk, nil, err
	}
	copies, err = openStore(filepath.Join(cfg.Data, CopiesDir), "the copies of the events on disk", max(cfg.Memory.IndexBytes()/2, localstore.MinMemory), localstore.Held, nil, log,
		func(d *localstore.Store) error { return projection.ForgetOtherEventCopies(d, events, log) })
	if err != nil {
		disk.Close()
		return nil, nil, err
	}
	return disk, copies, nil
}

// openStore opens the store in dir with memory bytes for lookups (scanned,
// which may be nil: the keys read by Scan alone), and has forget empty it
// when it holds what the logs do not; what names it in errors.
func openStore(dir, what string, memory int64, lookups localstore.Lookups, scanned localstore.Scanned, log *slog.Logger, forget func(*localstore.Store) error) (*localstore.Store, error) {
	disk, _, err := localstore.OpenFor(dir, memory, lookups, scanned, log)
	if err == nil {
		if err = forget(disk); err != nil {
			disk.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", what, dir, err)
	}
	return disk, nil
}

// catchUp starts the read models on disk and waits until they hold the
// logs up to where they were now, logging how far they are every few
// seconds and, once they are there, how much of the logs the disk held
// and how long the catching up took; /readyz says not ready meanwhile.
func (s *Server) catchUp(wctx context.Context, st *stores, tail bus.Tail, history *projection.History, types *projection.TypeIndex, aggs *projection.Aggregates, copies *projection.EventCopies) error {
	commands, err := projection.LastStored(wctx, st.commands)
	if err != nil {
		return err
	}
	events, err := projection.LastStored(wctx, st.events)
	if err != nil {
		return err
	}
	// What the disk holds as it was left (by a stop, or a kill).
	heldCommands, heldEvents, err := history.Progress()
	if err != nil {
		return err
	}
	var heldTypes uint64
	if types != nil {
		if heldTypes, err = types.Progress(); err != nil {
			return err
		}
	}
	heldAggregates, err := aggs.Progress()
	if err != nil {
		return err
	}
	if err := history.Start(wctx, tail); err != nil {
		return err
	}
	if err := aggs.Start(wctx, tail); err != nil {
		return err
	}
	if types != nil {
		if err := types.Start(wctx, tail); err != nil {
			return err
		}
	}
	// Nothing waits for the copies: a read past them goes to the log.
	if copies != nil {
		if err := copies.Start(wctx, tail); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(wctx)
	defer cancel()
	stop := context.AfterFunc(s.parent, cancel)
	defer stop()
	start := time.Now()
	s.Ready.Set(ReadyIndex, fmt.Errorf("catching up with the logs"))
	done := make(chan error, 1)
	go func() {
		err := history.WaitThrough(ctx, commands, events)
		if err == nil {
			err = aggs.WaitThrough(ctx, events)
		}
		if err == nil && types != nil {
			err = types.WaitThrough(ctx, events)
		}
		done <- err
	}()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
			s.Ready.Set(ReadyIndex, nil)
			s.log.Info("the read models on disk caught up with the logs", "heldCommands", heldCommands, "heldEvents", heldEvents,
				"heldTypes", heldTypes, "heldAggregates", heldAggregates, "ofCommands", commands, "ofEvents", events, "took", time.Since(start).Round(time.Millisecond))
			return nil
		case <-tick.C:
			cmdHeld, evtHeld := history.Through()
			s.log.Info("the read models on disk are catching up with the logs", "commands", cmdHeld, "ofCommands", commands,
				"events", evtHeld, "aggregates", aggs.Through(), "ofEvents", events, "for", time.Since(start).Round(time.Second))
		}
	}
}
