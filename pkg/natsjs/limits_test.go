package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPutConsumerPastTheStreamsLimit: a stream that takes no more
// consumers refuses a new one with errs.ErrLimit, while its existing
// consumers can still be changed (paused, say).
func TestPutConsumerPastTheStreamsLimit(t *testing.T) {
	conn, _ := testConn(t)
	ctx := context.Background()
	if _, err := conn.JS.UpdateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, AllowDirect: true, MaxConsumers: 2}); err != nil {
		t.Fatal(err)
	}
	admin := conn.Consumers("T")
	spec := func(i int, paused bool) bus.ConsumerSpec {
		return bus.ConsumerSpec{Name: fmt.Sprintf("c%d", i), Filters: []string{fmt.Sprintf("t.%d", i)}, StartSeq: 1, Paused: paused}
	}
	for i := range 2 {
		if err := admin.PutConsumer(ctx, spec(i, false)); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.PutConsumer(ctx, spec(2, false)); !errors.Is(err, errs.ErrLimit) {
		t.Fatalf("third consumer: %v, want errs.ErrLimit", err)
	}
	if err := admin.PutConsumer(ctx, spec(1, true)); err != nil {
		t.Fatalf("pausing an existing consumer: %v", err)
	}
	if st, err := admin.Consumer(ctx, "c1"); err != nil || !st.Paused {
		t.Fatalf("c1: %+v, %v", st, err)
	}
}
