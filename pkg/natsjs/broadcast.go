package natsjs

import (
	"context"
	"fmt"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/nats-io/nats.go"
)

// Broadcast is bus.Broadcast on the connection's core NATS.
type Broadcast struct{ nc *nats.Conn }

var _ bus.Broadcast = Broadcast{}

// Broadcast returns core NATS publish and subscribe on c.
func (c *Conn) Broadcast() Broadcast { return Broadcast{nc: c.NC} }

// Publish implements bus.Broadcast. While the connection is down it
// sends nothing (errs.ErrUnavailable) rather than fill nats.go's
// reconnect buffer.
func (b Broadcast) Publish(subject string, data []byte) error {
	if !b.nc.IsConnected() {
		return fmt.Errorf("%w: not connected to NATS (%s)", errs.ErrUnavailable, b.nc.Status())
	}
	return translate(b.nc.Publish(subject, data))
}

// Subscribe implements bus.Broadcast. The subscription survives
// reconnects; it ends with ctx.
func (b Broadcast) Subscribe(ctx context.Context, subject string, fn func([]byte)) error {
	sub, err := b.nc.Subscribe(subject, func(m *nats.Msg) { fn(m.Data) })
	if err != nil {
		return translate(err)
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
	return nil
}
