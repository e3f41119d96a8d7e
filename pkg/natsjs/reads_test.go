package natsjs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/nats-io/nats.go/jetstream"
)

// TestQueryLogReadsApart: a QueryLog's reads (Range, Get, Last, LastSeq)
// go through the read connections, and the connection everything else
// uses carries none of them; its appends go through that connection. With
// no read connections, QueryLog reads through it like Log.
func TestQueryLogReadsApart(t *testing.T) {
	t.Parallel()
	for _, readConns := range []int{2, 0} {
		t.Run(fmt.Sprintf("%d read connections", readConns), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := natsjs.Connect(ctx, natsjs.Config{DataDir: t.TempDir(), ReadConns: readConns}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
				t.Fatal(err)
			}
			q, err := conn.QueryLog(ctx, "S")
			if err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				if _, err := q.Append(ctx, []*bus.Message{{Subject: fmt.Sprintf("s.%d", i), Header: bus.Header{}, Data: []byte("{}")}}, nil); err != nil {
					t.Fatal(err)
				}
			}
			before := conn.NC.Stats()
			if ms, err := q.Range(ctx, "s.>", 1, 100); err != nil || len(ms) != 20 {
				t.Fatalf("range: %d messages, %v", len(ms), err)
			}
			if _, err := q.Get(ctx, 3); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Last(ctx, "s.>"); err != nil {
				t.Fatal(err)
			}
			if last, err := q.LastSeq(ctx); err != nil || last != 20 {
				t.Fatalf("last sequence %d, %v", last, err)
			}
			after := conn.NC.Stats()
			sent := after.OutMsgs - before.OutMsgs
			switch {
			case readConns > 0 && sent != 0:
				t.Errorf("%d reads went through the main connection", sent)
			case readConns == 0 && sent == 0:
				t.Error("no read went through the main connection, and there is no other")
			}
			if _, err := q.Append(ctx, []*bus.Message{{Subject: "s.x", Header: bus.Header{}, Data: []byte("{}")}}, nil); err != nil {
				t.Fatal(err)
			}
			if conn.NC.Stats().OutMsgs == after.OutMsgs {
				t.Error("an append did not go through the main connection")
			}
		})
	}
}
