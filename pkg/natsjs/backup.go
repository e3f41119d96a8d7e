package natsjs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ManifestFile is the file, in a backup directory, that lists what the
// backup holds (Manifest).
const ManifestFile = "manifest.json"

// BackupFormat is the version of the backup directory's layout that
// Backup writes and Restore reads.
const BackupFormat = 1

// Manifest describes a backup directory: one snapshot file per stream,
// each as the server made it (a tar archive compressed with S2), with its
// size and SHA-256, and the stream's configuration and state at the
// snapshot.
type Manifest struct {
	Format  int            `json:"format"`
	Version string         `json:"version"` // of the agentbus that made it
	Prefix  string         `json:"prefix"`  // nats.prefix of the backed-up agentbus
	Server  string         `json:"server"`  // the NATS server's version
	Created time.Time      `json:"created"`
	Streams []StreamBackup `json:"streams"`
}

// StreamBackup is one stream (a key-value bucket is a stream KV_<name>) in
// a backup. Config and State are as the server gave them with the
// snapshot; Restore hands them back unchanged.
type StreamBackup struct {
	Name     string          `json:"name"`
	File     string          `json:"file"`
	Size     int64           `json:"size"`
	SHA256   string          `json:"sha256"`
	Messages uint64          `json:"messages"`
	LastSeq  uint64          `json:"lastSeq"`
	Config   json.RawMessage `json:"config"`
	State    json.RawMessage `json:"state"`
}

// StoreNames returns the names of the streams the stream and bucket specs
// make: a stream by its name, a bucket as KV_<name>. Consumers live in
// their stream's snapshot.
func StoreNames(specs []Spec) []string {
	var out []string
	for _, sp := range specs {
		switch sp.Kind {
		case "stream":
			out = append(out, sp.Name)
		case "kv":
			out = append(out, KVStream(sp.Name))
		}
	}
	return out
}

// streamName is what a backup may name a stream: it becomes a subject
// token and a file name.
var streamName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// snapshotTimeout bounds the wait for each chunk of a snapshot or for the
// server's answer to one.
const snapshotTimeout = 30 * time.Second

// apiError is the error of a JetStream API response.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (%d, error %d)", e.Description, e.Code, e.ErrCode)
}

// Backup writes into dir, which must be empty or absent, a snapshot of
// each of the named streams that exists on the server (with their
// consumers), then ManifestFile. Streams are snapshotted one after the
// other, in the order given: each is consistent in itself, not with the
// others written while agentbus runs. It returns the manifest and the
// names that did not exist. A backup that fails leaves dir without a
// manifest.
func (c *Conn) Backup(ctx context.Context, dir string, names []string, prefix, version string) (Manifest, []string, error) {
	m := Manifest{Format: BackupFormat, Version: version, Prefix: prefix, Server: c.NC.ConnectedServerVersion(), Created: time.Now().UTC()}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return m, nil, err
	}
	if entries, err := os.ReadDir(dir); err != nil {
		return m, nil, err
	} else if len(entries) > 0 {
		return m, nil, fmt.Errorf("%s is not empty: a backup goes into a new directory", dir)
	}
	var missing []string
	for _, name := range names {
		if !streamName.MatchString(name) {
			return m, nil, fmt.Errorf("stream name %q cannot be backed up", name)
		}
		sb, err := c.snapshot(ctx, dir, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			missing = append(missing, name)
			continue
		}
		if err != nil {
			return m, nil, fmt.Errorf("snapshot of %s: %w", name, err)
		}
		m.Streams = append(m.Streams, sb)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, nil, err
	}
	if err := writeFileSync(filepath.Join(dir, ManifestFile), append(b, '\n')); err != nil {
		return m, nil, err
	}
	return m, missing, nil
}

// snapshot asks the server for a snapshot of stream name and writes it to
// dir/<name>.tar.s2, acknowledging each chunk as it is written (the server
// sends no more than its window ahead of the acknowledgements).
func (c *Conn) snapshot(ctx context.Context, dir, name string) (StreamBackup, error) {
	sb := StreamBackup{Name: name, File: name + ".tar.s2"}
	if _, err := c.JS.Stream(ctx, name); err != nil {
		return sb, err
	}
	inbox := c.NC.NewInbox()
	chunks, err := c.NC.SubscribeSync(inbox)
	if err != nil {
		return sb, err
	}
	defer func() { _ = chunks.Unsubscribe() }()
	_ = chunks.SetPendingLimits(-1, -1) // the server's window bounds what is pending
	req, _ := json.Marshal(map[string]any{"deliver_subject": inbox})
	var resp struct {
		Error  *apiError       `json:"error"`
		Config json.RawMessage `json:"config"`
		State  json.RawMessage `json:"state"`
	}
	if err := c.apiRequest(ctx, "$JS.API.STREAM.SNAPSHOT."+name, req, &resp); err != nil {
		return sb, err
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == 10059 { // stream not found
			return sb, jetstream.ErrStreamNotFound
		}
		return sb, resp.Error
	}
	var state struct {
		Msgs    uint64 `json:"messages"`
		LastSeq uint64 `json:"last_seq"`
	}
	if err := json.Unmarshal(resp.State, &state); err != nil {
		return sb, fmt.Errorf("the server's snapshot state: %w", err)
	}
	sb.Config, sb.State, sb.Messages, sb.LastSeq = resp.Config, resp.State, state.Msgs, state.LastSeq

	f, err := os.OpenFile(filepath.Join(dir, sb.File), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return sb, err
	}
	defer f.Close()
	sum := sha256.New()
	w := io.MultiWriter(f, sum)
	for {
		wctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
		msg, err := chunks.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			return sb, fmt.Errorf("waiting for the next chunk after %d bytes: %w", sb.Size, err)
		}
		// The server ends with a message without data: a status 204 (or
		// no header) when all was sent, another status when it failed.
		if len(msg.Data) == 0 {
			if st := msg.Header.Get("Status"); st != "" && st != "204" {
				return sb, fmt.Errorf("the server ended the snapshot: %s %s", st, msg.Header.Get("Description"))
			}
			break
		}
		if _, err := w.Write(msg.Data); err != nil {
			return sb, err
		}
		sb.Size += int64(len(msg.Data))
		if msg.Reply != "" {
			if err := msg.Respond(nil); err != nil {
				return sb, err
			}
		}
	}
	if err := f.Sync(); err != nil {
		return sb, err
	}
	sb.SHA256 = hex.EncodeToString(sum.Sum(nil))
	return sb, f.Close()
}

// apiRequest sends a JetStream API request and decodes its answer into v.
func (c *Conn) apiRequest(ctx context.Context, subject string, req []byte, v any) error {
	rctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	msg, err := c.NC.RequestWithContext(rctx, subject, req)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("no JetStream answers %s: %w", subject, err)
		}
		return err
	}
	if err := json.Unmarshal(msg.Data, v); err != nil {
		return fmt.Errorf("the answer to %s: %w", subject, err)
	}
	return nil
}

// ReadManifest reads and checks the manifest of the backup in dir: its
// format, that prefix is the one it was made with, that every stream is
// one of names (the streams the restoring agentbus makes, StoreNames) and
// its file one Backup writes, and that every file has the size and
// SHA-256 the manifest gives it.
func ReadManifest(dir, prefix string, names []string) (Manifest, error) {
	var m Manifest
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return m, fmt.Errorf("no backup in %s: %w", dir, err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	if m.Format != BackupFormat {
		return m, fmt.Errorf("%s: format %d, this agentbus reads format %d", ManifestFile, m.Format, BackupFormat)
	}
	if m.Prefix != prefix {
		return m, fmt.Errorf("the backup is of nats.prefix %q, this agentbus's is %q", m.Prefix, prefix)
	}
	if len(m.Streams) == 0 {
		return m, fmt.Errorf("%s lists no stream", ManifestFile)
	}
	seen := map[string]bool{}
	for _, sb := range m.Streams {
		if !streamName.MatchString(sb.Name) || sb.File != sb.Name+".tar.s2" || seen[sb.Name] {
			return m, fmt.Errorf("%s: stream %q with file %q is not one a backup holds", ManifestFile, sb.Name, sb.File)
		}
		seen[sb.Name] = true
		if !slices.Contains(names, sb.Name) {
			return m, fmt.Errorf("%s: stream %q is not one of this agentbus's streams (%s)", ManifestFile, sb.Name, strings.Join(names, ", "))
		}
		var cfg struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(sb.Config, &cfg); err != nil || cfg.Name != sb.Name {
			return m, fmt.Errorf("%s: stream %s: its configuration does not name it", ManifestFile, sb.Name)
		}
		if err := checkFile(filepath.Join(dir, sb.File), sb.Size, sb.SHA256); err != nil {
			return m, err
		}
	}
	return m, nil
}

// checkFile checks that the file at path has size bytes and that SHA-256.
func checkFile(path string, size int64, sha string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sum := sha256.New()
	n, err := io.Copy(sum, f)
	if err != nil {
		return err
	}
	if n != size || hex.EncodeToString(sum.Sum(nil)) != sha {
		return fmt.Errorf("%s is damaged: %d bytes, SHA-256 %x; the manifest says %d bytes, %s", path, n, sum.Sum(nil), size, sha)
	}
	return nil
}

// RestoreOptions say what Restore may replace.
type RestoreOptions struct {
	// Force replaces streams that hold messages; without it Restore
	// refuses them, naming them, and changes nothing. Existing empty
	// streams are replaced either way.
	Force bool
}

// Restore restores every stream of the backup in dir (read and checked
// by ReadManifest) with its messages and consumers. It first checks that
// every stream is absent or empty (or Force), and changes nothing when
// one is not, or while a client waits on one of their consumers; then,
// stream by stream, it deletes the existing one and sends the snapshot, in
// chunks each acknowledged by the server. No agentbus may be using the
// server meanwhile: one would declare the streams it misses again.
func (c *Conn) Restore(ctx context.Context, dir string, m Manifest, opt RestoreOptions) error {
	var full []string
	exists := map[string]bool{}
	for _, sb := range m.Streams {
		s, err := c.JS.Stream(ctx, sb.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("stream %s: %w", sb.Name, err)
		}
		exists[sb.Name] = true
		if s.CachedInfo().State.Msgs > 0 {
			full = append(full, fmt.Sprintf("%s (%d messages)", sb.Name, s.CachedInfo().State.Msgs))
		}
		if err := notConsumed(ctx, s, sb.Name); err != nil {
			return err
		}
	}
	if len(full) > 0 && !opt.Force {
		return fmt.Errorf("refusing to replace streams that hold messages: %s; restore with --force to replace them", strings.Join(full, ", "))
	}
	for _, sb := range m.Streams {
		if exists[sb.Name] {
			if err := c.JS.DeleteStream(ctx, sb.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("delete stream %s before restoring it: %w", sb.Name, err)
			}
		}
		if err := c.restore(ctx, dir, sb); err != nil {
			return fmt.Errorf("restore of %s: %w", sb.Name, err)
		}
	}
	return nil
}

// notConsumed refuses stream name (s) while a client waits on one of its
// consumers (a pull request pending, or a push consumer bound): a running
// agentbus, most likely, which would declare the stream again once it is
// deleted. The server drops the pull requests of a client that is gone.
func notConsumed(ctx context.Context, s jetstream.Stream, name string) error {
	consumers := s.ListConsumers(ctx)
	var busy string
	for ci := range consumers.Info() { // read to the end: the lister blocks on each
		if busy == "" && (ci.NumWaiting > 0 || ci.PushBound) {
			busy = ci.Name
		}
	}
	if busy != "" {
		return fmt.Errorf("consumer %s of stream %s is in use (a running agentbus?): stop every agentbus and every client of it, then restore", busy, name)
	}
	if err := consumers.Err(); err != nil {
		return fmt.Errorf("consumers of stream %s: %w", name, err)
	}
	return nil
}

// restoreChunk is the size of the chunks Restore sends.
const restoreChunk = 128 * 1024

// restore sends the snapshot of sb to the server, which creates the
// stream from it, and checks the stream it reports against the manifest.
func (c *Conn) restore(ctx context.Context, dir string, sb StreamBackup) error {
	f, err := os.Open(filepath.Join(dir, sb.File))
	if err != nil {
		return err
	}
	defer f.Close()
	req, _ := json.Marshal(struct {
		Config json.RawMessage `json:"config"`
		State  json.RawMessage `json:"state"`
	}{sb.Config, sb.State})
	var resp struct {
		Error          *apiError `json:"error"`
		DeliverSubject string    `json:"deliver_subject"`
	}
	if err := c.apiRequest(ctx, "$JS.API.STREAM.RESTORE."+sb.Name, req, &resp); err != nil {
		return err
	}
	if resp.Error != nil {
		return resp.Error
	}
	if resp.DeliverSubject == "" {
		return errors.New("the server gave no subject to send the snapshot to")
	}
	// Each chunk waits for the server's empty acknowledgement; a chunk
	// the server could not store is answered with an error.
	sum := sha256.New()
	buf := make([]byte, restoreChunk)
	var sent int64
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			sum.Write(buf[:n])
			var ack struct {
				Error *apiError `json:"error"`
			}
			rctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
			msg, rerr := c.NC.RequestWithContext(rctx, resp.DeliverSubject, buf[:n])
			cancel()
			if rerr != nil {
				return fmt.Errorf("sending the snapshot after %d bytes: %w", sent, rerr)
			}
			if len(msg.Data) > 0 {
				if json.Unmarshal(msg.Data, &ack) == nil && ack.Error != nil {
					return ack.Error
				}
			}
			sent += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if got := hex.EncodeToString(sum.Sum(nil)); sent != sb.Size || got != sb.SHA256 {
		return fmt.Errorf("%s changed while it was sent (%d bytes, SHA-256 %s)", sb.File, sent, got)
	}
	// An empty message ends the transfer; the server answers when the
	// stream is restored.
	var done struct {
		Error *apiError `json:"error"`
		State *struct {
			Msgs    uint64 `json:"messages"`
			LastSeq uint64 `json:"last_seq"`
		} `json:"state"`
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	msg, err := c.NC.RequestWithContext(rctx, resp.DeliverSubject, nil)
	if err != nil {
		return fmt.Errorf("waiting for the server to restore the stream: %w", err)
	}
	if err := json.Unmarshal(msg.Data, &done); err != nil {
		return fmt.Errorf("the server's answer to the restore: %w", err)
	}
	if done.Error != nil {
		return done.Error
	}
	if done.State == nil {
		return errors.New("the server's answer to the restore has no stream state")
	}
	// Messages past their stream's max age or TTL since the backup may
	// be gone; the sequence reached may not differ.
	if st := *done.State; st.LastSeq != sb.LastSeq || st.Msgs > sb.Messages {
		return fmt.Errorf("restored %d messages up to sequence %d; the backup holds %d up to %d", st.Msgs, st.LastSeq, sb.Messages, sb.LastSeq)
	}
	return nil
}

// writeFileSync writes b to path and syncs it.
func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
