package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/agentbus/agentbus/pkg/server"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/settings"
	webhooksend "github.com/agentbus/agentbus/pkg/webhook/send"
	"github.com/agentbus/agentbus/test/testkit"
)

// receiver is a loopback webhook receiver that keeps every delivery.
type receiver struct {
	mu   sync.Mutex
	got  []delivery
	srv  *httptest.Server
	seen chan struct{}
}

type delivery struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{seen: make(chan struct{}, 100)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, delivery{req.Header.Clone(), body})
		r.mu.Unlock()
		select {
		case r.seen <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// signedWith waits for a delivery whose body holds text and reports
// whether its signature verifies under secret.
func (r *receiver) signedWith(t *testing.T, text, secret string) bool {
	t.Helper()
	key, err := webhooksend.Key(secret)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		for _, d := range r.got {
			if !bytes.Contains(d.body, []byte(text)) {
				continue
			}
			r.mu.Unlock()
			var unix int64
			if err := json.Unmarshal([]byte(d.header.Get("Webhook-Timestamp")), &unix); err != nil {
				t.Fatalf("webhook-timestamp %q", d.header.Get("Webhook-Timestamp"))
			}
			want := webhooksend.Signature([][]byte{key}, d.header.Get("Webhook-Id"), time.Unix(unix, 0), d.body)
			return strings.Contains(d.header.Get("Webhook-Signature"), want)
		}
		r.mu.Unlock()
		select {
		case <-r.seen:
		case <-deadline:
			t.Fatalf("no delivery holding %q", text)
		}
	}
}

// TestBackupRestore backs up a running agentbus (bearer auth, embedded
// NATS) after it registered an agent and a service, made a subscription
// and an API key and took commands; wipes its data dir; restores the
// backup into the store of a fresh one (refused through a running
// agentbus's server, while that one runs, and over its own keys and
// secrets without --force); and starts agentbus
// again: the registries, the subscription with its secret (still signing
// deliveries), the key and an old command's trace are back, and the old
// command resubmitted is the same command, processed once.
func TestBackupRestore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	natsAddr := testkit.FreeAddr(t)
	common := []string{"--data", dir, "--nats-listen", natsAddr}
	serveArgs := append([]string{"--auth", "bearer", "--allow-private-webhooks"}, common...)
	admin := func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		err := run(context.Background(), append(args, common...), &out, &errb)
		return out.String(), errb.String(), err
	}

	httpAddr, _, stop := startServe(t, serveArgs...)
	url := "http://" + httpAddr
	out, msg, err := admin("keys", "create", "--description", "kept")
	if err != nil {
		t.Fatalf("keys create: %v %s", err, msg)
	}
	key := strings.TrimSpace(out)
	api := func(args ...string) string {
		t.Helper()
		return mustCLI(t, url, append(args, "--key", key)...)
	}

	api("agents", "register", "--id", "shipper", "--name", "Shipping agent", "--accepts", "ShipOrder")
	api("services", "register", "--id", "billing", "--name", "Billing", "--accepts", "ChargeCustomer")
	rcv := newReceiver(t)
	m := regexp.MustCompile(`(?m)^id\s+(\S+)$`).FindStringSubmatch(api("subscriptions", "create", "--webhook", rcv.srv.URL, "--type", "NoteAdded"))
	if m == nil {
		t.Fatal("subscriptions create printed no id")
	}
	sub := m[1]
	// The subscription is made by its command: its secret is readable
	// once that is processed.
	var secret string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, msg, err := cli(t, url, "subscriptions", "secret", sub, "--key", key)
		if err == nil {
			secret = out
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscriptions secret: %v %s", err, msg)
		}
	}
	var acc struct{ ID, Status string }
	decodeJSON(t, api("send", "AddNote", "--data", `{"text":"before the backup"}`, "--id", "note-1", "--source", "backup-test", "--wait", "--json"), &acc)
	old := acc.ID
	if !rcv.signedWith(t, "before the backup", strings.TrimSpace(secret)) {
		t.Fatal("the delivery before the backup is not signed with the subscription's secret")
	}

	backupDir := filepath.Join(t.TempDir(), "backup")
	out, msg, err = admin("backup", "--out", backupDir)
	if err != nil {
		t.Fatalf("backup: %v\n%s%s", err, out, msg)
	}
	for _, s := range []string{"AGENTBUS_COMMANDS", "AGENTBUS_EVENTS", "KV_AGENTBUS_KEYS", "KV_AGENTBUS_SECRETS", "KV_AGENTBUS_WEBHOOKS"} {
		if !strings.Contains(out, "backed up "+s+":") {
			t.Errorf("backup did not back up %s:\n%s", s, out)
		}
	}
	// The correlation index is each replica's history on its disk, rebuilt
	// from the logs: no receipts bucket exists to be backed up.
	if strings.Contains(out, "RECEIPTS") {
		t.Errorf("backup names a receipts bucket:\n%s", out)
	}
	// A running agentbus waits on its consumers: a restore through any
	// door to its server (an external one has no other) is refused.
	running, ok, err := natsjs.AdminAccess(dir)
	if err != nil || !ok {
		t.Fatalf("admin access of the running agentbus: %v %v", ok, err)
	}
	conn, err := natsjs.Connect(context.Background(), running, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	all, err := storeNames(settings.Default())
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := natsjs.ReadManifest(backupDir, "agentbus", all)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Restore(context.Background(), backupDir, manifest, natsjs.RestoreOptions{Force: true}); err == nil || !strings.Contains(err.Error(), "is in use") {
		t.Errorf("restore into the server of a running agentbus: %v", err)
	}
	conn.Close()

	commandsSeq := regexp.MustCompile(`(?m)^backed up AGENTBUS_COMMANDS: \d+ messages up to sequence (\d+),`)
	before := commandsSeq.FindStringSubmatch(out)
	if before == nil {
		t.Fatalf("backup printed no sequence for AGENTBUS_COMMANDS:\n%s", out)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}

	// A fresh agentbus on the wiped dir: no restore while it runs; once
	// stopped, its own key and secret buckets are not replaced without
	// --force.
	_, _, stop = startServe(t, serveArgs...)
	if _, _, err := admin("restore", "--in", backupDir); err == nil || !strings.Contains(err.Error(), "is running") {
		t.Fatalf("restore into a running agentbus: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin("restore", "--in", backupDir); err == nil || !strings.Contains(err.Error(), "KV_AGENTBUS_KEYS") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("restore over a fresh agentbus's keys: %v", err)
	}
	// The fresh agentbus left read models on disk of its own logs: the
	// restore removes them, for the next start to rebuild.
	if _, err := os.Stat(filepath.Join(dir, server.DiskDir)); err != nil {
		t.Fatalf("the fresh agentbus's read models on disk: %v", err)
	}
	if out, msg, err := admin("restore", "--in", backupDir, "--force"); err != nil {
		t.Fatalf("restore --force: %v\n%s%s", err, out, msg)
	}
	if _, err := os.Stat(filepath.Join(dir, server.DiskDir)); !os.IsNotExist(err) {
		t.Fatalf("after the restore, the read models on disk: %v; want them removed", err)
	}

	// Every call from here on authenticates with the key made before the
	// backup.
	httpAddr, _, _ = startServe(t, serveArgs...)
	url = "http://" + httpAddr
	if out := api("agents", "list"); !regexp.MustCompile(`(?m)^shipper\s+Shipping agent\s+active\s+ShipOrder`).MatchString(out) {
		t.Errorf("agents after the restore:\n%s", out)
	}
	if out := api("services", "list"); !regexp.MustCompile(`(?m)^billing\s+Billing\s+ChargeCustomer`).MatchString(out) {
		t.Errorf("services after the restore:\n%s", out)
	}
	if got := api("subscriptions", "secret", sub); got != secret {
		t.Errorf("the subscription's secret after the restore: %q, want %q", got, secret)
	}
	if out := api("trace", old); !strings.Contains(out, "NoteAdded") || !strings.Contains(out, "before the backup") {
		t.Errorf("trace of the old command after the restore:\n%s", out)
	}
	decodeJSON(t, api("send", "AddNote", "--data", `{"text":"before the backup"}`, "--id", "note-1", "--source", "backup-test", "--json"), &acc)
	if acc.ID != old {
		t.Errorf("the old command resubmitted: id %s, want %s", acc.ID, old)
	}
	// The command log is where it was at the backup: the resubmission
	// queued nothing. (A backup of the restored agentbus says so.)
	out, msg, err = admin("backup", "--out", filepath.Join(t.TempDir(), "again"))
	if err != nil {
		t.Fatalf("backup of the restored agentbus: %v\n%s%s", err, out, msg)
	}
	if after := commandsSeq.FindStringSubmatch(out); after == nil || after[1] != before[1] {
		t.Errorf("the command log after the resubmission: %v, at the backup %s", after, before[1])
	}
	api("send", "AddNote", "--data", `{"text":"after the restore"}`, "--wait")
	if !rcv.signedWith(t, "after the restore", strings.TrimSpace(secret)) {
		t.Error("the delivery after the restore is not signed with the subscription's secret")
	}
	var tr struct{ Events []json.RawMessage }
	decodeJSON(t, api("trace", old, "--json"), &tr)
	if len(tr.Events) != 1 {
		t.Errorf("the old command has %d events after it was resubmitted, want 1", len(tr.Events))
	}
}

// TestBackupRestoreRefuseBadArguments: backup needs --out, not the data
// dir itself; restore needs --in holding a backup; both say so before
// reaching NATS, and make no data dir.
func TestBackupRestoreRefuseBadArguments(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"backup"}, "usage: agentbus backup --out DIR"},
		{[]string{"backup", "--out", data}, "--out is the data directory"},
		{[]string{"backup", "--out", filepath.Join(data, "backups")}, "--out is the data directory or inside it"},
		{[]string{"backup", "--out", data + "/./"}, "--out is the data directory"},
		{[]string{"restore"}, "usage: agentbus restore --in DIR"},
		{[]string{"restore", "--in", t.TempDir()}, "no backup in"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), append(c.args, "--data", data, "--nats-listen", ""), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error holding %q", c.args, err, c.want)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("a refused command made the data dir: %v", err)
	}
}

// TestBackupRestoreExternalNATS: with --nats-url, a backup of one server
// restores into another, and the key made on the first is listed by the
// second; a configuration of another nats.prefix is refused.
func TestBackupRestoreExternalNATS(t *testing.T) {
	from, to := testkit.NATSServer(t), testkit.NATSServer(t)
	cmd := func(url string, args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := run(context.Background(), append(args, "--nats-url", url), &out, &errb)
		return out.String() + errb.String(), err
	}
	if out, err := cmd(from, "streams", "apply"); err != nil {
		t.Fatalf("streams apply: %v\n%s", err, out)
	}
	if out, err := cmd(from, "keys", "create", "--description", "moved"); err != nil {
		t.Fatalf("keys create: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "backup")
	if out, err := cmd(from, "backup", "--out", dir); err != nil || !strings.Contains(out, "backed up KV_AGENTBUS_KEYS: ") {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	other := filepath.Join(t.TempDir(), "other.yaml")
	if err := os.WriteFile(other, []byte("nats:\n  prefix: other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cmd(to, "restore", "--in", dir, "--config", other); err == nil || !strings.Contains(err.Error(), `the backup is of nats.prefix "agentbus"`) {
		t.Fatalf("restore into another prefix: %v\n%s", err, out)
	}
	if out, err := cmd(to, "restore", "--in", dir); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	if out, err := cmd(to, "keys", "list"); err != nil || !strings.Contains(out, "moved") {
		t.Fatalf("keys list after the restore: %v\n%s", err, out)
	}
}
