package main

import (
	"testing"
	"time"
)

// TestLatencyRoundOnBothTargets runs a short, slow latency round against
// agentbus and against the bare reference pipeline: every command is
// accepted and becomes visible to the tracker within 30 s (and, on
// agentbus, the sampled ones are found by GET /events?correlationId=).
func TestLatencyRoundOnBothTargets(t *testing.T) {
	ab, err := startAgentbus(false)
	if err != nil {
		t.Fatal(err)
	}
	defer ab.Stop()
	rp, err := startReferencePipeline()
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Stop()
	for _, c := range []struct {
		name   string
		tg     target
		sample int
	}{{"agentbus", ab, 5}, {"bare pipeline", rp, 0}} {
		r, err := runLatency(c.tg, 200, 200*time.Millisecond, time.Second, 30*time.Second, 4, c.sample, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.Measured == 0 || r.HTTPErrors != 0 || r.NeverVisible != 0 || r.BadReceipts != 0 || r.Rejected != 0 {
			t.Errorf("%s: %d measured, %d HTTP errors (%s), %d never visible, %d bad receipts, %d rejected",
				c.name, r.Measured, r.HTTPErrors, r.FirstErr, r.NeverVisible, r.BadReceipts, r.Rejected)
		}
		if r.VerifyTotal != c.sample || r.Verified != r.VerifyVisible {
			t.Errorf("%s: %d of %d sampled commands verified (%d visible): %s", c.name, r.Verified, r.VerifyTotal, r.VerifyVisible, r.VerifyErr)
		}
		if r.Logs != "none" {
			t.Logf("%s: warnings %s", c.name, r.Logs)
		}
	}
}
