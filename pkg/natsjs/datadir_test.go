package natsjs_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
)

// TestFailedStartRemovesOnlyWhatItMade: an embedded server that cannot
// start (its address is taken) leaves an existing data dir as it found
// it: what was there stays, the lock file and jetstream/ it made go. Once
// started, Abandon removes a data dir it made; Close keeps it.
func TestFailedStartRemovesOnlyWhatItMade(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.Connect(ctx, natsjs.Config{DataDir: dir, Listen: busy.Addr().String()}, log); err == nil {
		t.Fatal("an embedded server started on a taken address")
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "keep" {
		t.Fatalf("the data dir after a failed start: %v %v, want only keep", entries, err)
	}

	for _, abandon := range []bool{true, false} {
		fresh := filepath.Join(t.TempDir(), "a", "b")
		conn, err := natsjs.Connect(ctx, natsjs.Config{DataDir: fresh}, log)
		if err != nil {
			t.Fatal(err)
		}
		if abandon {
			conn.Abandon()
		} else {
			conn.Close()
		}
		_, err = os.Stat(filepath.Dir(fresh))
		if gone := os.IsNotExist(err); gone != abandon {
			t.Errorf("abandoned %v: the data dir's parent it made is gone: %v (%v)", abandon, gone, err)
		}
	}
}
