package rest_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/rest"
)

// records is a slog handler that keeps every record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) all() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.recs...)
}

// TestClientGoneIsNotAnInternalError: a client that disconnects while its
// operation runs makes the operation fail on its cancelled context; that
// is logged at debug as a disconnect, not as an internal error.
func TestClientGoneIsNotAnInternalError(t *testing.T) {
	t.Parallel()
	returned := make(chan struct{})
	table := []rest.Endpoint{{Route: rest.Route{Method: http.MethodGet, Path: "/slow"}, Operation: ops.Operation{ID: "slow",
		Handle: func(ctx context.Context, _ *ops.Request) (*ops.Response, error) {
			defer close(returned)
			<-ctx.Done()
			return nil, errs.Internal(ctx.Err()) // as an operation reading the store would
		}}}}
	log := &records{}
	srv := httptest.NewServer(rest.New(rest.Config{Endpoint: endpoint}, table, slog.New(log)))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/slow", nil)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("the request was answered %d", res.StatusCode)
	}
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the operation never saw its client leave")
	}
	var debug bool
	for deadline := time.Now().Add(5 * time.Second); !debug && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, r := range log.all() {
			if r.Level >= slog.LevelWarn {
				t.Fatalf("logged at %s: %s", r.Level, r.Message)
			}
			debug = debug || r.Level == slog.LevelDebug && strings.Contains(r.Message, "disconnected")
		}
	}
	if !debug {
		t.Error("the disconnect was not logged at debug")
	}
}
