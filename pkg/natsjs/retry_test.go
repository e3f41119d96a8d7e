package natsjs

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// TestRetryTriesGrow: with first set, each try gets twice the last, up to
// try; without it, every try gets try.
func TestRetryTriesGrow(t *testing.T) {
	for _, c := range []struct {
		r    retry
		want []time.Duration
	}{
		{retry{first: time.Second, try: 5 * time.Second}, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{retry{try: 5 * time.Second}, []time.Duration{5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}},
	} {
		var got []time.Duration
		c.r.retryable = func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }
		_ = c.r.run(context.Background(), func(try time.Duration) error {
			got = append(got, try)
			if len(got) == len(c.want) {
				return errors.New("done")
			}
			return context.DeadlineExceeded
		})
		if !slices.Equal(got, c.want[:len(got)]) || len(got) != len(c.want) {
			t.Errorf("%+v: tries %v, want %v", c.r, got, c.want)
		}
	}
}

// TestNotYet: the errors a later start may not meet, and not the ones
// for the operator to fix.
func TestNotYet(t *testing.T) {
	for _, err := range []error{nats.ErrNoServers, context.DeadlineExceeded, errs.ErrUnavailable, nats.ErrConnectionClosed} {
		if !NotYet(err) {
			t.Errorf("NotYet(%v) = false", err)
		}
	}
	for _, err := range []error{ErrCredentialsRefused, errors.New("nats-server 2.9.0 is too old")} {
		if NotYet(err) {
			t.Errorf("NotYet(%v) = true", err)
		}
	}
}

// TestDownIsUnavailableAtOnce: while a connection has lost its server and
// looks for it again, a request is not sent: it fails with
// errNotConnected, which a store operation's retry does not repeat (one
// try, not tries until the budget ends) and which callers hear as
// errs.ErrUnavailable; start-up keeps waiting through it.
func TestDownIsUnavailableAtOnce(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := request(context.Background(), nc, &nats.Msg{Subject: "nobody.listens"}, time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a request while connected: %v, want it sent (no responders)", err)
	}
	ns.Shutdown()
	deadline := time.Now().Add(10 * time.Second)
	for !down(nc) {
		if time.Now().After(deadline) {
			t.Fatalf("the connection never noticed its server gone: %s", nc.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	tries := 0
	err = storeRetry.run(context.Background(), func(try time.Duration) error {
		tries++
		_, err := request(context.Background(), nc, &nats.Msg{Subject: "nobody.listens"}, try)
		return err
	})
	if !errors.Is(err, errNotConnected) || tries != 1 {
		t.Fatalf("a store operation while down: %v after %d tries, want errNotConnected after one", err, tries)
	}
	if !errors.Is(translate(err), errs.ErrUnavailable) || !NotYet(err) {
		t.Fatalf("errNotConnected: translated %v, NotYet %v; want ErrUnavailable and true", translate(err), NotYet(err))
	}
}
