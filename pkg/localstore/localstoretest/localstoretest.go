// Package localstoretest gives tests a store on disk of their own.
package localstoretest

import (
	"log/slog"
	"testing"

	"github.com/agentbus/agentbus/pkg/localstore"
)

// Open opens a store in dir (a new temporary directory when ""), at the
// least memory, closed when the test ends.
func Open(t testing.TB, dir string) *localstore.Store {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	disk, _, err := localstore.Open(dir, localstore.MinMemory, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	return disk
}
