package testkit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream connects a JetStream client to the NATS server at url with
// opts, and closes the connection when t ends. It fails t when the
// connection or the client cannot be made.
func JetStream(t testing.TB, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream client on %s: %v", url, err)
	}
	return js
}

// StreamInfo reads stream's current configuration and state. It fails t
// when the stream cannot be read within 5s.
func StreamInfo(t testing.TB, js jetstream.JetStream, stream string) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream) // fetches the stream's info afresh
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	return s.CachedInfo()
}

// SubjectMsgs counts the messages of stream on the subjects filter
// matches. It fails t when the stream cannot be read within 5s.
func SubjectMsgs(t testing.TB, js jetstream.JetStream, stream, filter string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatalf("stream %s, subjects %s: %v", stream, filter, err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// ConsumerInfo reads the current configuration and state of the consumer
// name on stream, or nil when there is no such consumer. It fails t when
// the consumer cannot be read within 5s.
func ConsumerInfo(t testing.TB, js jetstream.JetStream, stream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, name) // fetches the consumer's info afresh
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("consumer %s/%s: %v", stream, name, err)
	}
	return c.CachedInfo()
}

// StreamState reads the current state of stream (messages, sequences).
func StreamState(t testing.TB, js jetstream.JetStream, stream string) jetstream.StreamState {
	t.Helper()
	return StreamInfo(t, js, stream).State
}

// PipelineConsumers returns the consumers that take a command from the
// command stream to its events, as "stream/consumer": the processor, then
// extra. (A command's receipt is each replica's history on disk, which
// follows the logs without a consumer.)
func PipelineConsumers(extra ...string) []string {
	return append([]string{"AGENTBUS_COMMANDS/processor"}, extra...)
}

// WaitIdle polls every 10ms until each consumer ("stream/consumer") has no
// message pending and none delivered but unacknowledged, so that
// everything stored before the call has been handled. It fails t when a
// consumer cannot be read or one still has work after 20s.
func WaitIdle(t testing.TB, js jetstream.JetStream, consumers ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		busy := ""
		for _, c := range consumers {
			stream, name, ok := strings.Cut(c, "/")
			if !ok {
				t.Fatalf("WaitIdle: %q is not stream/consumer", c)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cons, err := js.Consumer(ctx, stream, name)
			var info *jetstream.ConsumerInfo
			if err == nil {
				info, err = cons.Info(ctx)
			}
			cancel()
			if err != nil {
				t.Fatalf("consumer %s: %v", c, err)
			}
			if info.NumPending > 0 || info.NumAckPending > 0 {
				busy = c
				break
			}
		}
		if busy == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer %s still has pending or unacknowledged messages after 20s", busy)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// AggregateMsgs counts the events of one aggregate of a sharded type on
// stream: the messages of its shard's subjects whose Agentbus-Aggregate-Id
// is aggID (the shard holds other aggregates' events too).
func AggregateMsgs(t testing.TB, js jetstream.JetStream, stream, tenant, aggType, aggID string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	filter := bus.Subjects{Prefix: "agentbus"}.Aggregate(tenant, aggType, aggID)
	total := int(SubjectMsgs(t, js, stream, filter))
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		t.Fatalf("stream %s, subjects %s: %v", stream, filter, err)
	}
	n := 0
	for read := 0; read < total; {
		batch, err := c.Fetch(total-read, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("stream %s, subjects %s: %v", stream, filter, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			if m.Headers().Get(bus.HeaderAggregateID) == aggID {
				n++
			}
		}
		if batch.Error() != nil || got == 0 {
			t.Fatalf("stream %s, subjects %s: read %d of %d: %v", stream, filter, read, total, batch.Error())
		}
		read += got
	}
	return n
}
