package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/streams"
)

// backupSynopsis heads backup -h.
const backupSynopsis = `usage: agentbus backup --out DIR [flags]

Writes into DIR (new or empty) a snapshot of every stream and bucket of
streams/ — commands, events, API keys, webhook secrets and delivery
state — with their consumers, each as the NATS server makes it
(tar + S2), and manifest.json: the version, nats.prefix, each stream's
configuration, last sequence, size and SHA-256. It runs while agentbus
serves; each stream is consistent in itself, in the order commands,
events, then the rest. It reaches NATS like the keys commands: --nats-url,
or a running agentbus's embedded server (through --data), or else the
embedded store in --data. See deploy/README.md, "Backup and restore".`

// restoreSynopsis heads restore -h.
const restoreSynopsis = `usage: agentbus restore --in DIR [--force] [flags]

Restores the backup in DIR (agentbus backup): checks its manifest (format,
nats.prefix, only streams and buckets of streams/, each file's size and
SHA-256), then recreates every stream
and bucket from its snapshot, with its messages and consumers. Streams that
hold messages are refused, naming them, unless --force replaces them;
empty ones are replaced. No agentbus may run on the NATS server meanwhile
(it would declare again the streams being replaced; a stream with a client
waiting on one of its consumers is refused): with the embedded
server, stop agentbus and give its --data; with --nats-url, stop every
replica. Start agentbus after.`

// backup runs `agentbus backup`.
func backup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("backup", backupSynopsis, stderr)
	out := fs.String("out", "", "the directory to write the backup into: new or empty (required)")
	cfg, err := loadConfig(fs, args, adminSettings...)
	if err != nil {
		return err
	}
	if *out == "" {
		return errors.New("usage: agentbus backup --out DIR [flags]")
	}
	if within(*out, cfg.Data) {
		return errors.New("--out is the data directory or inside it: a backup goes elsewhere")
	}
	log := newLogger(cfg, stderr)
	stores, err := storeNames(cfg)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := connectAdmin(cctx, cfg, "agentbus-backup", log)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close()
	m, missing, err := conn.Backup(ctx, *out, stores, cfg.NATS.Prefix, readBuild().Version)
	if err != nil {
		return err
	}
	if len(m.Streams) == 0 {
		return fmt.Errorf("no stream of nats.prefix %q on this NATS server: nothing to back up", cfg.NATS.Prefix)
	}
	for _, sb := range m.Streams {
		fmt.Fprintf(stdout, "backed up %s: %d messages up to sequence %d, %d bytes\n", sb.Name, sb.Messages, sb.LastSeq, sb.Size)
	}
	if len(missing) > 0 {
		fmt.Fprintf(stdout, "not on the server, not in the backup: %s\n", strings.Join(missing, ", "))
	}
	fmt.Fprintf(stdout, "backup written to %s (%s)\n", *out, natsjs.ManifestFile)
	return nil
}

// restore runs `agentbus restore`.
func restore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("restore", restoreSynopsis, stderr)
	in := fs.String("in", "", "the backup directory, as agentbus backup wrote it (required)")
	force := fs.Bool("force", false, "replace streams that hold messages")
	cfg, err := loadConfig(fs, args, adminSettings...)
	if err != nil {
		return err
	}
	if *in == "" {
		return errors.New("usage: agentbus restore --in DIR [--force] [flags]")
	}
	stores, err := storeNames(cfg)
	if err != nil {
		return err
	}
	// A backup made by an earlier version may hold its receipts bucket:
	// restored, it is removed at agentbus's next start.
	former := natsjs.KVStream(natsjs.NamesFor(cfg.NATS.Prefix).Receipts)
	m, err := natsjs.ReadManifest(*in, cfg.NATS.Prefix, append(stores, former))
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := connectAdmin(cctx, cfg, "agentbus-restore", log)
	if err != nil {
		return err
	}
	defer conn.Close()
	if !conn.Embedded() && conn.NC.ConnectedServerName() == natsjs.EmbeddedServerName {
		return fmt.Errorf("an agentbus is running on %s: stop it, then restore into its --data", cfg.Data)
	}
	if err := conn.Check(cctx, cfg.NATS.Prefix); err != nil {
		return err
	}
	if err := conn.Restore(ctx, *in, m, natsjs.RestoreOptions{Force: *force}); err != nil {
		return err
	}
	for _, sb := range m.Streams {
		fmt.Fprintf(stdout, "restored %s: %d messages up to sequence %d\n", sb.Name, sb.Messages, sb.LastSeq)
	}
	// The read models on disk reflect the logs before the restore: the
	// next start rebuilds them from the restored ones.
	index := filepath.Join(cfg.Data, server.DiskDir)
	if err := os.RemoveAll(index); err != nil {
		return fmt.Errorf("remove the read models on disk in %s (the next start must rebuild them): %w", index, err)
	}
	fmt.Fprintf(stdout, "removed the read models on disk in %s: the next start rebuilds them from the logs\n", index)
	fmt.Fprintf(stdout, "restored the backup of %s (agentbus %s); start agentbus\n", m.Created.Format(time.RFC3339), m.Version)
	return nil
}

// storeNames are the streams and buckets streams/ makes under cfg's
// settings: what a backup holds and a restore may replace.
func storeNames(cfg settings.Config) ([]string, error) {
	specs, err := natsjs.LoadSpecs(streams.Files, server.StreamSettings(cfg))
	if err != nil {
		return nil, err
	}
	return natsjs.StoreNames(specs), nil
}

// within reports whether path is dir or lies inside it, both made absolute
// first (a path that cannot be is taken as it is).
func within(path, dir string) bool {
	if p, err := filepath.Abs(path); err == nil {
		path = p
	}
	if d, err := filepath.Abs(dir); err == nil {
		dir = d
	}
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
