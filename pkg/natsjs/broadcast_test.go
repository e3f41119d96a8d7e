package natsjs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
)

// TestBroadcast: what is published reaches a subscriber of the subject
// and no other; a subscription whose context ended receives nothing more;
// a closed connection publishes nothing and says it is unavailable.
func TestBroadcast(t *testing.T) {
	t.Parallel()
	conn := natsjstest.Conn(t)
	b := conn.Broadcast()
	ctx, cancel := context.WithCancel(context.Background())
	got, other := make(chan string, 4), make(chan string, 4)
	if err := b.Subscribe(ctx, "agentbus.pushed", func(d []byte) { got <- string(d) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe(context.Background(), "agentbus.other", func(d []byte) { other <- string(d) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish("agentbus.pushed", []byte("one")); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if d != "one" {
			t.Fatalf("received %q", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing received")
	}
	cancel()
	time.Sleep(100 * time.Millisecond) // the unsubscription reaches the server
	_ = b.Publish("agentbus.pushed", []byte("two"))
	if err := conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		t.Fatalf("received %q after the subscription ended", d)
	case d := <-other:
		t.Fatalf("another subject's subscriber received %q", d)
	case <-time.After(200 * time.Millisecond):
	}
	conn.NC.Close()
	if err := b.Publish("agentbus.pushed", []byte("three")); !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("publish on a closed connection: %v, want ErrUnavailable", err)
	}
}
