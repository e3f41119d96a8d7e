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

// ErrServerUnfit is returned (wrapped) when the server cannot run agentbus.
var ErrServerUnfit = errors.New("nats server unfit for agentbus")

// Check verifies the server can be trusted with agentbus's guarantees:
// JetStream enabled, API level >= MinAPILevel, and a conditional append on a
// wildcard subject refused as it must be. Older servers accept the headers
// they do not know and silently drop the guarantee, so they are refused
// here. The error is one line saying what is wrong.
func (c *Conn) Check(ctx context.Context) error {
	version := c.NC.ConnectedServerVersion()
	info, err := c.JS.AccountInfo(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return fmt.Errorf("%w: JetStream is not enabled on nats-server %s (start it with -js)", ErrServerUnfit, version)
		}
		return fmt.Errorf("%w: cannot read JetStream account info from nats-server %s: %v", ErrServerUnfit, version, err)
	}
	if info.API.Level < MinAPILevel {
		return fmt.Errorf("%w: nats-server %s is too old (JetStream API level %d); agentbus needs nats-server 2.12 or newer (API level %d)",
			ErrServerUnfit, version, info.API.Level, MinAPILevel)
	}
	return c.canary(ctx)
}

// canary proves the server enforces Nats-Expected-Last-Subject-Sequence-Subject
// on a throwaway in-memory stream.
func (c *Conn) canary(ctx context.Context) error {
	name := "AGENTBUS_CANARY_" + strings.ReplaceAll(nats.NewInbox()[7:], ".", "")
	subj := "agentbus-canary." + name
	s, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subj + ".>"}, Storage: jetstream.MemoryStorage, MaxMsgs: 10,
		AllowAtomicPublish: true, AllowDirect: true,
	})
	if err != nil {
		return fmt.Errorf("%w: cannot create a canary stream: %v", ErrServerUnfit, err)
	}
	defer func() { _ = c.JS.DeleteStream(context.WithoutCancel(ctx), name) }()
	if got := s.CachedInfo().Config; !got.AllowAtomicPublish || !got.AllowDirect {
		return fmt.Errorf("%w: nats-server %s ignored allow_atomic/allow_direct on a stream (needs 2.12 or newer)", ErrServerUnfit, c.NC.ConnectedServerVersion())
	}
	if _, err := c.JS.Publish(ctx, subj+".a.b", []byte("x")); err != nil {
		return fmt.Errorf("%w: canary publish failed: %v", ErrServerUnfit, err)
	}
	m := nats.NewMsg(subj + ".a.c")
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	m.Header.Set(expectedLastSubjSeqSubjHeader, subj+".a.*")
	if _, err := c.JS.PublishMsg(ctx, m); err == nil {
		return fmt.Errorf("%w: nats-server %s accepted a conditional append it should refuse (Nats-Expected-Last-Subject-Sequence-Subject unsupported); agentbus needs 2.12 or newer", ErrServerUnfit, c.NC.ConnectedServerVersion())
	}
	return nil
}

const expectedLastSubjSeqSubjHeader = "Nats-Expected-Last-Subject-Sequence-Subject"

func redactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
