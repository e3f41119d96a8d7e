package natsjs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
	"github.com/nats-io/nats.go/jetstream"
)

// fillSource makes, on conn, a stream T_LOG of 600 messages of 1 KiB
// (several snapshot chunks) with a durable consumer that acknowledged the
// first 100, and a bucket T_KV holding k=v.
func fillSource(t *testing.T, conn *natsjs.Conn) {
	t.Helper()
	ctx := context.Background()
	s, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "T_LOG", Subjects: []string{"t.log.>"}})
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("x"), 1024)
	for i := range 600 {
		if _, err := conn.JS.Publish(ctx, fmt.Sprintf("t.log.%d", i%7), payload); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "reader", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(100, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 100 {
		t.Fatalf("acknowledged %d messages, want 100", n)
	}
	kv, err := conn.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "T_KV"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}

// testStores are the streams fillSource makes, as StoreNames names them.
var testStores = []string{"T_LOG", "KV_T_KV"}

// TestBackupRestore: a backup holds each stream that exists with its
// messages and consumers; restored on another server, the streams, the
// consumer's position and the bucket's value come back. A stream that
// holds messages is replaced only with Force, and a refused restore
// changes nothing; an empty one is replaced.
func TestBackupRestore(t *testing.T) {
	ctx := context.Background()
	src := natsjstest.Conn(t)
	fillSource(t, src)
	dir := filepath.Join(t.TempDir(), "backup")
	m, missing, err := src.Backup(ctx, dir, []string{"T_LOG", "KV_T_KV", "T_ABSENT"}, "t", "test")
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 1 || missing[0] != "T_ABSENT" || len(m.Streams) != 2 {
		t.Fatalf("backed up %+v, missing %v", m.Streams, missing)
	}
	if log := m.Streams[0]; log.Name != "T_LOG" || log.Messages != 600 || log.LastSeq != 600 || log.Size == 0 || len(log.SHA256) != 64 {
		t.Fatalf("manifest entry of T_LOG: %+v", log)
	}
	if _, _, err := src.Backup(ctx, dir, []string{"T_LOG"}, "t", "test"); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("a backup into a used directory: %v", err)
	}

	dst := natsjstest.Conn(t)
	// An empty T_LOG is there already: replaced without Force.
	if _, err := dst.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "T_LOG", Subjects: []string{"t.log.>"}}); err != nil {
		t.Fatal(err)
	}
	read, err := natsjs.ReadManifest(dir, "t", testStores)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Restore(ctx, dir, read, natsjs.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := dst.JS.Stream(ctx, "T_LOG")
	if err != nil {
		t.Fatal(err)
	}
	if st := s.CachedInfo().State; st.Msgs != 600 || st.LastSeq != 600 {
		t.Fatalf("restored T_LOG: %+v", st)
	}
	c, err := s.Consumer(ctx, "reader")
	if err != nil {
		t.Fatalf("the consumer was not restored: %v", err)
	}
	if ci := c.CachedInfo(); ci.AckFloor.Stream != 100 || ci.NumPending != 500 {
		t.Fatalf("restored consumer: ack floor %d, pending %d; want 100, 500", ci.AckFloor.Stream, ci.NumPending)
	}
	kv, err := dst.JS.KeyValue(ctx, "T_KV")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("restored bucket: %v %v", e, err)
	}

	// Now T_LOG and T_KV hold messages: refused without Force, naming
	// them, and nothing changes.
	if _, err := kv.Put(ctx, "k", []byte("changed")); err != nil {
		t.Fatal(err)
	}
	err = dst.Restore(ctx, dir, read, natsjs.RestoreOptions{})
	if err == nil || !strings.Contains(err.Error(), "T_LOG (600 messages)") || !strings.Contains(err.Error(), "KV_T_KV") {
		t.Fatalf("restore over streams with messages: %v", err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "changed" {
		t.Fatalf("a refused restore changed the bucket: %v %v", e, err)
	}
	// A client waiting on a consumer (a running agentbus would): refused,
	// Force or not; once it is gone, Force replaces.
	live, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "live", DeliverPolicy: jetstream.DeliverNewPolicy, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	client, err := dst.Dial("waiting client")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	cjs, err := jetstream.New(client)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := cjs.Consumer(ctx, "T_LOG", "live")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Fetch(1, jetstream.FetchMaxWait(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ci, err := live.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ci.NumWaiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pull request is not waiting: %+v", ci)
		}
	}
	err = dst.Restore(ctx, dir, read, natsjs.RestoreOptions{Force: true})
	if err == nil || !strings.Contains(err.Error(), "consumer live of stream T_LOG is in use") {
		t.Fatalf("restore while a client waits on a consumer: %v", err)
	}
	client.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := dst.Restore(ctx, dir, read, natsjs.RestoreOptions{Force: true})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("forced restore after the client left: %v", err)
		}
	}
	if kv, err = dst.JS.KeyValue(ctx, "T_KV"); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("bucket after a forced restore: %v %v", e, err)
	}
}

// TestReadManifestRefuses: a backup of another prefix, a damaged
// snapshot file, or a manifest naming a file outside the backup is
// refused before anything is restored.
func TestReadManifestRefuses(t *testing.T) {
	ctx := context.Background()
	src := natsjstest.Conn(t)
	fillSource(t, src)
	dir := filepath.Join(t.TempDir(), "backup")
	if _, _, err := src.Backup(ctx, dir, []string{"T_LOG", "KV_T_KV"}, "t", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.ReadManifest(dir, "other", testStores); err == nil || !strings.Contains(err.Error(), `"t"`) {
		t.Fatalf("another prefix: %v", err)
	}
	if _, err := natsjs.ReadManifest(t.TempDir(), "t", testStores); err == nil || !strings.Contains(err.Error(), "no backup") {
		t.Fatalf("an empty directory: %v", err)
	}

	raw, err := os.ReadFile(filepath.Join(dir, natsjs.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m natsjs.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	hostile := m
	hostile.Streams = append([]natsjs.StreamBackup(nil), m.Streams...)
	hostile.Streams[0].Name, hostile.Streams[0].File = "../T_LOG", "../T_LOG.tar.s2"
	b, _ := json.Marshal(hostile)
	if err := os.WriteFile(filepath.Join(dir, natsjs.ManifestFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.ReadManifest(dir, "t", testStores); err == nil || !strings.Contains(err.Error(), "not one a backup holds") {
		t.Fatalf("a manifest naming ../T_LOG: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, natsjs.ManifestFile), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.ReadManifest(dir, "t", []string{"KV_T_KV"}); err == nil || !strings.Contains(err.Error(), "not one of this agentbus's streams") {
		t.Fatalf("a manifest naming a stream the agentbus does not make: %v", err)
	}

	file := filepath.Join(dir, m.Streams[0].File)
	snap, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	snap[len(snap)/2] ^= 0xff
	if err := os.WriteFile(file, snap, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.ReadManifest(dir, "t", testStores); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("a damaged snapshot: %v", err)
	}
}
