package main

import (
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/nats-io/nats.go"
)

// TestRejectedEvent holds the tracker's reading of an event's type to
// the subjects agentbus gives its events, all of them under the subjects
// the tracker watches.
func TestRejectedEvent(t *testing.T) {
	subj := bus.Subjects{Prefix: "agentbus"}
	for _, c := range []struct {
		subject  string
		rejected bool
	}{
		{subj.Event(bus.RootEvents, "default", "", "", decide.TypeCommandRejected), true},
		{subj.Event(bus.RootEvents, "t1", "order", "o-1", decide.TypeCommandRejected), true},
		{subj.Event(bus.RootEvents, "default", "order", "o-1", "OrderPlaced"), false},
		{subj.Event(bus.RootEvents, "default", "", "", "CommandRejectedLater"), false},
		{subj.Event(bus.RootEvents, "default", "agent", "CommandRejected", "AgentRegistered"), false},
	} {
		if !strings.HasPrefix(c.subject, strings.TrimSuffix(trackedEvents, ">")) {
			t.Errorf("%s: not under %s", c.subject, trackedEvents)
		}
		if got := rejectedEvent(c.subject); got != c.rejected {
			t.Errorf("%s: rejected %v, want %v", c.subject, got, c.rejected)
		}
	}
}

// TestTrackerCountsRejections feeds the tracker, on the bare pipeline's
// server, an event of one command and a CommandRejected of another: both
// become visible, one of them rejected.
func TestTrackerCountsRejections(t *testing.T) {
	rp, err := startReferencePipeline()
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Stop()
	corrs := []string{commandCorrelation("trk", 0), commandCorrelation("trk", 1)}
	tr, err := newTracker(rp, corrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	nc, err := rp.observer()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj := bus.Subjects{Prefix: "agentbus"}
	for i, s := range []string{
		subj.Event(bus.RootEvents, "default", "order", "o-1", "OrderPlaced"),
		subj.Event(bus.RootEvents, "default", "", "", decide.TypeCommandRejected),
	} {
		m := nats.NewMsg(s)
		m.Header.Set(bus.HeaderCorrelationID, corrs[i])
		m.Data = []byte(`{}`)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if !tr.wait(10 * time.Second) {
		t.Fatalf("%d of 2 commands not visible", tr.left.Load())
	}
	if n := tr.rejected.Load(); n != 1 {
		t.Errorf("rejected %d, want 1", n)
	}
}
