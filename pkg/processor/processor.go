// Package processor lets another Go program act as an agentbus processor:
// it consumes commands from the command stream, runs your Deciders and
// appends the resulting events with the same guarantees as agentbus's
// built-in processors (atomic batches, deterministic event ids, optimistic
// concurrency, CommandRejected on failure) — it runs the same runtime,
// pkg/execute, on the same streams. A late copy of a command (redelivered,
// or published again) is recognised by its events' deterministic ids
// within the duplicate window and, however late, by its receipt in the
// history of receipts the processor keeps on its disk as an agentbus
// replica does. It finds an aggregate's last event in an aggregate index
// on the same disk (Config.Data, or a temporary directory), as events
// share their shard's subjects.
//
// Programs in other languages follow the plain NATS contract in the README.
package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbus/agentbus/config"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/execute"
	"github.com/agentbus/agentbus/pkg/localstore"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/projection"
)

// commandAckWait is how long a delivered command may go unacknowledged
// before it is delivered again: as the built-in processor's
// (streams/20-consumers.yaml), well within the command stream's default
// duplicate window (30 s), so that a redelivered command's events are
// still refused by their ids.
const commandAckWait = 10 * time.Second

// Config says where to consume from and how.
type Config struct {
	// NATS is the server to connect to; NATS.URL is required (an external
	// program cannot use agentbus's in-process server).
	NATS natsjs.Config
	// Prefix is the subject prefix (default "agentbus").
	Prefix string
	// Durable is the durable consumer on the command stream.
	Durable string
	// Bind uses an existing consumer, e.g. the one agentbus created for a
	// registered agent ("agent_<tenant>_<id>", bus.AgentConsumer),
	// instead of creating one.
	Bind bool
	// Workers handle commands in parallel (default 8).
	Workers int
	// Source is the envelope source of the events written (default
	// "agentbus/<Durable>").
	Source string
	// SchemaBase is agentbus's public URL, used for event dataschema URIs
	// (default http://127.0.0.1:8080).
	SchemaBase string
	// MultiTenant must match agentbus's tenancy mode: it puts the tenant in
	// event dataschema URIs, as agentbus does.
	MultiTenant bool
	// Catalog validates commands and types events; default: the built-in
	// catalogue plus the example catalogue shipped with agentbus.
	Catalog *catalog.Catalog
	// Logger defaults to a text logger on stderr.
	Logger *slog.Logger
	// Data, when set, is a directory where the processor keeps its read
	// models (in Data/index, as an agentbus replica does, rebuilt from the
	// logs when absent): the aggregate index, which finds the last event
	// of each aggregate, and the history of every command's receipt, by
	// which a redelivered or late copy of a command it decided is
	// recognised. Empty: both are built from the whole logs at every
	// start, in a temporary directory. Run takes in the logs up to their
	// end before it consumes.
	Data string
}

// Run consumes commands until ctx ends, deciding each with deciders (by
// command type). Unless Bind is set it creates (or updates) the durable
// consumer filtered to the deciders' types across all tenants. It returns
// nil on a clean stop, and an error wrapping natsjs.ErrConsumerDeleted
// when the consumer is deleted under it (a registered agent's consumer is
// when the agent is deleted).
func Run(ctx context.Context, cfg Config, deciders map[string]decide.Decider) error {
	if cfg.NATS.URL == "" {
		return errors.New("processor: NATS.URL is required")
	}
	if cfg.Durable == "" {
		return errors.New("processor: Durable is required")
	}
	if len(deciders) == 0 {
		return errors.New("processor: no deciders")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "agentbus"
	}
	if cfg.Source == "" {
		cfg.Source = "agentbus/" + cfg.Durable
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	cat := cfg.Catalog
	if cat == nil {
		var err error
		if cat, err = catalog.Load(catalog.Builtin(), config.ExampleCatalog()); err != nil {
			return err
		}
	}
	for typ := range deciders {
		if len(cat.CommandVersions(typ)) == 0 {
			return fmt.Errorf("processor: command type %q is not in the catalogue: every such command would be rejected", typ)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg.NATS.WaitForServer = true // started beside agentbus and NATS, it may come up first
	conn, err := natsjs.Connect(cctx, cfg.NATS, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	names := natsjs.NamesFor(cfg.Prefix)
	subj := bus.Subjects{Prefix: cfg.Prefix}
	var ports execute.Ports
	if ports.Events, err = conn.Log(cctx, names.Events); err != nil {
		return fmt.Errorf("processor: is agentbus set up on this NATS? %w", err)
	}
	if ports.Commands, err = conn.Log(cctx, names.Commands); err != nil {
		return fmt.Errorf("processor: is agentbus set up on this NATS? %w", err)
	}
	aggs, err := openDisk(ctx, cctx, cfg.Data, &ports, subj, log)
	if err != nil {
		return fmt.Errorf("processor: the read models on disk: %w", err)
	}
	defer aggs.close()
	ports.Aggregates = aggs.Aggregates
	ports.Consumers = conn.Consumers(names.Commands)
	proc := execute.New(execute.Config{Prefix: cfg.Prefix, Source: cfg.Source,
		Schemas: catalog.URLs{Base: cfg.SchemaBase, MultiTenant: cfg.MultiTenant}}, cat, ports, log)
	var filters []string
	for typ, d := range deciders {
		proc.Handle(typ, d)
		filters = append(filters, subj.CommandsOfType(typ))
	}
	if !cfg.Bind {
		if err := conn.EnsureConsumer(cctx, names.Commands, cfg.Durable, filters, commandAckWait, 20); err != nil {
			return fmt.Errorf("processor: consumer %s: %w", cfg.Durable, err)
		}
	}
	log.Info("processor running", "consumer", cfg.Durable, "types", len(deciders))
	return conn.Consume(ctx, names.Commands, cfg.Durable,
		natsjs.ConsumeOptions{Workers: cfg.Workers, KeyOf: proc.OrderKey}, proc.Handler())
}

// diskModels are the processor's read models on its disk, open until
// close.
type diskModels struct {
	*projection.Aggregates
	close func()
}

// openDisk opens the processor's store in dir/index (a temporary
// directory, removed at close, when dir is empty), starts the aggregate
// index and the history of receipts on it (which it gives to p.Receipts),
// and waits until they hold the logs up to their ends. A
// store of another format, or that holds more of a log than the log has
// (another log's, or kept across a restore), starts over.
func openDisk(ctx, cctx context.Context, dir string, p *execute.Ports, subj bus.Subjects, log *slog.Logger) (*diskModels, error) {
	keep := dir != ""
	var cleanup []func()
	closeAll := func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}
	if !keep {
		tmp, err := os.MkdirTemp("", "agentbus-processor-")
		if err != nil {
			return nil, err
		}
		dir = tmp
		cleanup = append(cleanup, func() { _ = os.RemoveAll(tmp) })
	}
	disk, _, err := localstore.OpenFor(filepath.Join(dir, "index"), localstore.MinMemory*2, localstore.MostlyAbsent, projection.ScannedOnly, log)
	if err != nil {
		closeAll()
		return nil, err
	}
	cleanup = append(cleanup, func() { disk.Close() })
	mctx, stop := context.WithCancel(ctx)
	cleanup = append(cleanup, stop) // before the store closes
	ok := false
	defer func() {
		if !ok {
			closeAll()
		}
	}()
	cmdLast, err := p.Commands.LastSeq(cctx)
	if err != nil {
		return nil, err
	}
	evtLast, err := p.Events.LastSeq(cctx)
	if err != nil {
		return nil, err
	}
	if err := projection.ForgetOtherLogs(disk, subj, cmdLast, evtLast, log.With("dir", dir)); err != nil {
		return nil, err
	}
	history := projection.NewHistory(disk, p.Commands, subj, log)
	aggs := projection.NewAggregates(disk, subj, log)
	tail := bus.LogTail(p.Events, subj)
	if err := history.Start(mctx, tail); err != nil {
		return nil, err
	}
	if err := aggs.Start(mctx, tail); err != nil {
		return nil, err
	}
	commands, err := projection.LastStored(cctx, p.Commands)
	if err != nil {
		return nil, err
	}
	events, err := projection.LastStored(cctx, p.Events)
	if err != nil {
		return nil, err
	}
	if err := history.WaitThrough(ctx, commands, events); err != nil {
		return nil, err
	}
	p.Receipts = projection.NewReceipts(history, p.Events)
	if err := aggs.WaitThrough(ctx, events); err != nil {
		return nil, err
	}
	ok = true
	return &diskModels{Aggregates: aggs, close: closeAll}, nil
}
