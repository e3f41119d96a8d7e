package natsjs_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/nats-io/nats.go/jetstream"
)

// filterWay is one way agentbus sets a consumer's filter subjects.
type filterWay struct {
	name string
	put  func(ctx context.Context, conn *natsjs.Conn, filters []string) error
	// unfiltered: the way can leave a consumer without a filter.
	unfiltered bool
}

var filterWays = []filterWay{
	{name: "Apply", unfiltered: true, put: func(ctx context.Context, conn *natsjs.Conn, filters []string) error {
		// As at start: the consumer's file has no filter, the catalogue's
		// override gives it one (or none, when there is no override).
		specs := []natsjs.Spec{
			{File: "t.yaml", Kind: "stream", Name: "T", Subjects: []string{"t.>"}},
			{File: "t.yaml", Kind: "consumer", Stream: "T", Name: "c"},
		}
		var overrides map[string][]string
		if len(filters) > 0 {
			overrides = map[string][]string{"T/c": filters}
		}
		return conn.Apply(ctx, specs, overrides)
	}},
	{name: "EnsureConsumer", unfiltered: true, put: func(ctx context.Context, conn *natsjs.Conn, filters []string) error {
		return conn.EnsureConsumer(ctx, "T", "c", filters, 5*time.Second, 20)
	}},
	{name: "PutConsumer", put: func(ctx context.Context, conn *natsjs.Conn, filters []string) error {
		return conn.Consumers("T").PutConsumer(ctx, bus.ConsumerSpec{Name: "c", Filters: filters, StartSeq: 1})
	}},
}

// openStore starts the embedded server on dir with the stream "T" on
// "t.>", as agentbus does on every start.
func openStore(t *testing.T, dir string) *natsjs.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := natsjs.Connect(ctx, natsjs.Config{DataDir: dir}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn
}

// TestFilterChangesApplyAcrossARestart: a consumer's filter subjects change
// between two starts of the server on the same store (agentbus started
// with a catalogue of more or fewer command types), by every way agentbus
// sets them. The change applies at once and is in force afterwards.
func TestFilterChangesApplyAcrossARestart(t *testing.T) {
	one, two, three := []string{"t.a"}, []string{"t.a", "t.b"}, []string{"t.a", "t.b", "t.c"}
	changes := []struct {
		name     string
		from, to []string
	}{
		{"1 to 2", one, two},
		{"2 to 1", two, one},
		{"2 to 3", two, three},
		{"3 to 2", three, two},
		{"0 to 1", nil, one},
		{"1 to 0", one, nil},
		{"0 to 2", nil, two},
		{"2 to 0", two, nil},
	}
	for _, way := range filterWays {
		for _, ch := range changes {
			if !way.unfiltered && (len(ch.from) == 0 || len(ch.to) == 0) {
				continue
			}
			t.Run(way.name+"/"+ch.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				dir := t.TempDir()
				conn := openStore(t, dir)
				if err := way.put(ctx, conn, ch.from); err != nil {
					conn.Close()
					t.Fatalf("first start, filters %q: %v", ch.from, err)
				}
				conn.Close()

				conn = openStore(t, dir)
				defer conn.Close()
				if err := way.put(ctx, conn, ch.to); err != nil {
					t.Fatalf("second start, filters %q to %q: %v", ch.from, ch.to, err)
				}
				st, err := conn.Consumers("T").Consumer(ctx, "c")
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(st.Filters, ch.to) {
					t.Fatalf("consumer filters on %q, want %q", st.Filters, ch.to)
				}
			})
		}
	}
}

// TestFilterRefusalIsTheServers: filters the server refuses (overlapping
// ones) after a restart come back as the server's own error, not as
// something else and not as success.
func TestFilterRefusalIsTheServers(t *testing.T) {
	for _, way := range filterWays {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			conn := openStore(t, dir)
			if err := way.put(ctx, conn, []string{"t.a"}); err != nil {
				conn.Close()
				t.Fatal(err)
			}
			conn.Close()

			conn = openStore(t, dir)
			defer conn.Close()
			err := way.put(ctx, conn, []string{"t.a", "t.>"})
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeOverlappingFilterSubjects {
				t.Fatalf("overlapping filters: %v, want the server's error %d", err, jetstream.JSErrCodeOverlappingFilterSubjects)
			}
			if strings.Contains(err.Error(), "not supported") {
				t.Errorf("the refusal reads as a server without support: %v", err)
			}
		})
	}
}
