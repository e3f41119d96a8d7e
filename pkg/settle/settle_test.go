package settle_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/settle"
)

// delivery records how it was settled.
type delivery struct {
	n     uint64
	how   []string
	delay time.Duration
}

func (d *delivery) Message() *bus.Message     { return &bus.Message{Subject: "s", Header: bus.Header{}} }
func (d *delivery) NumDelivered() uint64      { return d.n }
func (d *delivery) Ack(context.Context) error { d.how = append(d.how, "ack"); return nil }
func (d *delivery) Nak(delay time.Duration) error {
	d.how = append(d.how, "nak")
	d.delay = delay
	return nil
}
func (d *delivery) Term(string) error { d.how = append(d.how, "term"); return nil }

var _ bus.Delivery = (*delivery)(nil)

var (
	errFlaky  = errors.New("flaky")
	errBroker = errors.New("broker unavailable")
	errFinal  = errors.New("final outcome failed")
)

func TestWrapSettlesOnce(t *testing.T) {
	t.Parallel()
	exhausted := func(fail bool) func(context.Context, *bus.Message, uint64, error) error {
		return func(context.Context, *bus.Message, uint64, error) error {
			if fail {
				return errFinal
			}
			return nil
		}
	}
	bounded := settle.Policy{Backoff: settle.Linear(time.Second, 3*time.Second), Attempts: 3,
		Endless: func(err error) bool { return errors.Is(err, errBroker) }}
	withOutcome := bounded
	withOutcome.Exhausted = exhausted(false)
	failingOutcome := bounded
	failingOutcome.Exhausted = exhausted(true)
	tests := []struct {
		name   string
		policy settle.Policy
		err    error
		n      uint64
		want   string
		delay  time.Duration
	}{
		{"success acks", bounded, nil, 1, "ack", 0},
		{"a failure naks after the backoff", bounded, errFlaky, 2, "nak", 2 * time.Second},
		{"the backoff is bounded", settle.Policy{Backoff: settle.Linear(time.Second, 3*time.Second)}, errFlaky, 9, "nak", 3 * time.Second},
		{"default backoff", settle.Policy{}, errFlaky, 40, "nak", time.Second},
		{"permanent acks at once", bounded, settle.Permanent(errFlaky), 1, "ack", 0},
		{"permanent wrapped", bounded, fmt.Errorf("ctx: %w", settle.Permanent(errFlaky)), 1, "ack", 0},
		{"last attempt without an outcome terms", bounded, errFlaky, 3, "term", 0},
		{"last attempt with an outcome acks", withOutcome, errFlaky, 3, "ack", 0},
		{"a failed outcome naks", failingOutcome, errFlaky, 4, "nak", 3 * time.Second},
		{"endless failures never give up", bounded, errBroker, 50, "nak", 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := &delivery{n: tt.n}
			settle.Wrap(tt.policy, func(context.Context, *bus.Message, uint64) error { return tt.err })(context.Background(), d)
			if len(d.how) != 1 || d.how[0] != tt.want {
				t.Fatalf("settled %v, want %s once", d.how, tt.want)
			}
			if d.delay != tt.delay {
				t.Errorf("nak delay %v, want %v", d.delay, tt.delay)
			}
		})
	}
}

func TestPermanentNil(t *testing.T) {
	if settle.Permanent(nil) != nil {
		t.Fatal("Permanent(nil) is not nil")
	}
}

// traced is a delivery of a message that carries a trace context.
type traced struct{ delivery }

func (d *traced) Message() *bus.Message {
	return &bus.Message{Subject: "s", Header: bus.Header{bus.HeaderCorrelationID: {"c-1"},
		"traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}
}

// TestWrapLogsTheTrace: the line about a failed delivery names the
// correlation id and the trace id its message carries.
func TestWrapLogsTheTrace(t *testing.T) {
	t.Parallel()
	var buf strings.Builder
	h := settle.Wrap(settle.Policy{What: "process command", Log: slog.New(slog.NewTextHandler(&buf, nil))},
		func(context.Context, *bus.Message, uint64) error { return errFlaky })
	h(context.Background(), &traced{delivery{n: 1}})
	if line := buf.String(); !strings.Contains(line, "correlationId=c-1") || !strings.Contains(line, "traceId=4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Fatalf("log line %q", line)
	}
}
