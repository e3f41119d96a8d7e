package natsjs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/nats-io/nats.go/jetstream"
)

// Consumers implements bus.ConsumerAdmin on the durable consumers of one
// stream. Safe for concurrent use.
type Consumers struct {
	js     jetstream.JetStream
	stream string
}

var _ bus.ConsumerAdmin = (*Consumers)(nil)

// Consumers returns the consumer admin of stream.
func (c *Conn) Consumers(stream string) *Consumers {
	return &Consumers{js: c.JS, stream: stream}
}

// Settings of the consumers PutConsumer creates: an agent has 30s to ack a
// command and gets it at most 20 times, as with agentbus's own processor.
const (
	agentAckWait       = 30 * time.Second
	agentMaxDeliver    = 20
	agentMaxAckPending = 1000
	// pauseFor is how far in the future a paused consumer's pause ends:
	// effectively until it is resumed.
	pauseFor = 100 * 365 * 24 * time.Hour
)

// Consumers implements bus.ConsumerAdmin.
func (k *Consumers) Consumers(ctx context.Context, prefix string) ([]bus.ConsumerState, error) {
	st, err := k.js.Stream(ctx, k.stream)
	if err != nil {
		return nil, translate(err)
	}
	var out []bus.ConsumerState
	lister := st.ListConsumers(ctx)
	for info := range lister.Info() {
		if strings.HasPrefix(info.Name, prefix) {
			out = append(out, *stateOf(info))
		}
	}
	if err := lister.Err(); err != nil {
		return nil, translate(err)
	}
	return out, nil
}

// stateOf is a consumer's info as a bus.ConsumerState.
func stateOf(info *jetstream.ConsumerInfo) *bus.ConsumerState {
	return &bus.ConsumerState{
		Name: info.Name, Filters: filtersOf(info.Config), Paused: info.Paused,
		Metadata:  ownMetadata(info.Config.Metadata),
		Delivered: info.Delivered.Stream, AckFloor: info.AckFloor.Stream,
		NumPending: info.NumPending, NumAckPending: info.NumAckPending,
	}
}

// Consumer implements bus.ConsumerAdmin.
func (k *Consumers) Consumer(ctx context.Context, name string) (*bus.ConsumerState, error) {
	cons, err := k.js.Consumer(ctx, k.stream, name)
	if err != nil {
		return nil, translate(err)
	}
	return stateOf(cons.CachedInfo()), nil
}

// PutConsumer implements bus.ConsumerAdmin. A new consumer starts at
// spec.StartSeq (or spec.StartTime), paused when spec says so. An existing
// one keeps its start and its position: it is paused or resumed first, then
// its filters and metadata are updated, so metadata that says a state was
// applied is only stored once that state is in force.
func (k *Consumers) PutConsumer(ctx context.Context, spec bus.ConsumerSpec) error {
	cfg := jetstream.ConsumerConfig{
		Durable: spec.Name, Description: spec.Description, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: agentAckWait, MaxDeliver: agentMaxDeliver, MaxAckPending: agentMaxAckPending,
		Metadata: ownMetadata(spec.Metadata),
	}
	switch len(spec.Filters) {
	case 0:
		return errors.New("put consumer: no filter subjects")
	case 1:
		cfg.FilterSubject = spec.Filters[0]
	default:
		cfg.FilterSubjects = spec.Filters
	}
	cur, err := k.js.Consumer(ctx, k.stream, spec.Name)
	switch {
	case err == nil:
		info := cur.CachedInfo()
		// The server ignores pause_until on an update: pause and resume
		// have their own API.
		old := info.Config
		cfg.MaxAckPending = old.MaxAckPending
		switch {
		case spec.Paused && !info.Paused:
			_, err = k.js.PauseConsumer(ctx, k.stream, spec.Name, *pauseUntil())
		case !spec.Paused && info.Paused:
			_, err = k.js.ResumeConsumer(ctx, k.stream, spec.Name)
			// nats-server does not wake a resumed consumer: the pull
			// requests waiting on it are only served at the next new
			// message or pull request, up to the client's pull expiry
			// later. A change of max_ack_pending wakes it, so a resume
			// flips it between two equivalent values.
			cfg.MaxAckPending = agentMaxAckPending
			if old.MaxAckPending == agentMaxAckPending {
				cfg.MaxAckPending = agentMaxAckPending + 1
			}
		}
		if err != nil {
			return translate(err)
		}
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = old.DeliverPolicy, old.OptStartSeq, old.OptStartTime
		return translate(putConsumer(ctx, k.js, k.stream, cfg, k.js.UpdateConsumer))
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		if spec.StartSeq > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, spec.StartSeq
		} else {
			t := spec.StartTime.UTC()
			cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
		}
		if spec.Paused {
			cfg.PauseUntil = pauseUntil()
		}
		return translate(putConsumer(ctx, k.js, k.stream, cfg, k.js.CreateConsumer))
	default:
		return translate(err)
	}
}

// DeleteConsumer implements bus.ConsumerAdmin.
func (k *Consumers) DeleteConsumer(ctx context.Context, name string) error {
	err := k.js.DeleteConsumer(ctx, k.stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	return translate(err)
}

// putConsumer sends cfg, a durable consumer of stream, with put (a
// create, an update or either) and returns nil once the consumer filters
// on the subjects cfg asks for. The server's refusal is returned as the
// server gave it; a consumer found with other filters after the server
// accepted is an error naming both.
//
// The server's answer is not taken for what it holds: a nats-server
// that is not clustered answers the first create or update of a consumer
// it recovered from its store with the config it recovered, from before
// the request, while it applies the request. nats.go reads that answer to
// a request for several filters as a server without multiple filters
// (jetstream.ErrConsumerMultipleFilterSubjectsNotSupported). So when the
// answer's filters are not the ones asked for, the consumer's info, which
// is current, is read to learn what it filters on.
func putConsumer(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig,
	put func(context.Context, string, jetstream.ConsumerConfig) (jetstream.Consumer, error)) error {
	want := filtersOf(cfg)
	cons, err := put(ctx, stream, cfg)
	switch {
	case errors.Is(err, jetstream.ErrConsumerMultipleFilterSubjectsNotSupported):
	case err != nil:
		return err
	case slices.Equal(filtersOf(cons.CachedInfo().Config), want):
		return nil
	}
	if cons, err = js.Consumer(ctx, stream, cfg.Durable); err != nil {
		return err
	}
	if got := filtersOf(cons.CachedInfo().Config); !slices.Equal(got, want) {
		return fmt.Errorf("consumer %s of %s filters on %q, not on the %q asked for", cfg.Durable, stream, got, want)
	}
	return nil
}

func pauseUntil() *time.Time {
	t := time.Now().Add(pauseFor).UTC()
	return &t
}

func filtersOf(c jetstream.ConsumerConfig) []string {
	if c.FilterSubject != "" {
		return []string{c.FilterSubject}
	}
	return c.FilterSubjects
}

// ownMetadata drops the keys the server adds itself ("_nats.*").
func ownMetadata(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !strings.HasPrefix(k, "_nats") {
			out[k] = v
		}
	}
	return out
}
