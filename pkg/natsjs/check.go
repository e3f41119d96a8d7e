package natsjs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Check verifies the server can be trusted with agentbus's guarantees:
// JetStream enabled, API level >= MinAPILevel, and a conditional append on a
// wildcard subject refused as it must be. Older servers accept the headers
// they do not know and silently drop the guarantee, so they are refused
// here. The canary lives under prefix (stream <PREFIX>_CANARY_…, subjects
// <prefix>.canary.…), so a NATS user limited to agentbus's names passes.
// The error is one line saying what is wrong.
func (c *Conn) Check(ctx context.Context, prefix string) error {
	version := c.NC.ConnectedServerVersion()
	var info *jetstream.AccountInfo
	err := untilSettled(ctx, func(ctx context.Context) (err error) {
		info, err = c.JS.AccountInfo(ctx)
		return err
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return fmt.Errorf("JetStream is not enabled on nats-server %s (start it with -js)", version)
		}
		return fmt.Errorf("cannot read JetStream account info from nats-server %s: %w", version, err)
	}
	if info.API.Level < MinAPILevel {
		return fmt.Errorf("nats-server %s is too old (JetStream API level %d); agentbus needs nats-server 2.12 or newer (API level %d)",
			version, info.API.Level, MinAPILevel)
	}
	return c.canary(ctx, prefix)
}

// canary proves the server enforces Nats-Expected-Last-Subject-Sequence-Subject
// on a throwaway in-memory stream.
func (c *Conn) canary(ctx context.Context, prefix string) error {
	name, subj := canaryNames(prefix)
	var s jetstream.Stream
	err := untilSettled(ctx, func(ctx context.Context) (err error) {
		s, err = c.JS.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{subj + ".>"}, Storage: jetstream.MemoryStorage, MaxMsgs: 10,
			AllowAtomicPublish: true, AllowDirect: true,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("cannot create a canary stream: %w", err)
	}
	defer func() { _ = c.JS.DeleteStream(context.WithoutCancel(ctx), name) }()
	if got := s.CachedInfo().Config; !got.AllowAtomicPublish || !got.AllowDirect {
		return fmt.Errorf("nats-server %s ignored allow_atomic/allow_direct on a stream (needs 2.12 or newer)", c.NC.ConnectedServerVersion())
	}
	if _, err := c.JS.Publish(ctx, subj+".a.b", []byte("x")); err != nil {
		return fmt.Errorf("canary publish failed: %w", err)
	}
	m := nats.NewMsg(subj + ".a.c")
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, subj+".a.*")
	if _, err := c.JS.PublishMsg(ctx, m); err == nil {
		return fmt.Errorf("nats-server %s accepted a conditional append it should refuse (Nats-Expected-Last-Subject-Sequence-Subject unsupported); agentbus needs 2.12 or newer", c.NC.ConnectedServerVersion())
	}
	return nil
}

// canaryNames returns a fresh canary stream name and the subject under
// which it stores, both derived from prefix.
func canaryNames(prefix string) (stream, subject string) {
	id := strings.ReplaceAll(nats.NewInbox()[7:], ".", "")
	stream = upperPrefix(prefix) + "_CANARY_" + id
	return stream, prefix + ".canary." + id
}

func redactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
