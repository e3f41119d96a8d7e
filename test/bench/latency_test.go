package main

import (
	"testing"
	"time"
)

// TestLatencyRoundOnBothTargets runs a short, slow latency round against
// agentbus and against the bare reference pipeline, fresh ones for each
// of the tracker's modes (the rounds' commands are the same): every
// command is accepted and becomes visible to the tracker within 30 s (and,
// on agentbus, the sampled ones are found by GET /events?correlationId=).
func TestLatencyRoundOnBothTargets(t *testing.T) {
	defer func(m string) { visibleMode = m }(visibleMode)
	for _, mode := range []string{"core", "watch"} {
		visibleMode = mode
		ab, err := startAgentbus(false)
		if err != nil {
			t.Fatal(err)
		}
		rp, err := startReferencePipeline()
		if err != nil {
			ab.Stop()
			t.Fatal(err)
		}
		for _, c := range []struct {
			name   string
			tg     target
			sample int
		}{{"agentbus", ab, 5}, {"bare pipeline", rp, 0}} {
			r, err := runLatency(c.tg, 200, 200*time.Millisecond, time.Second, 30*time.Second, 4, c.sample, nil)
			if err != nil {
				t.Errorf("%s, %s: %v", c.name, mode, err)
				continue
			}
			if r.Measured == 0 || r.HTTPErrors != 0 || r.NeverVisible != 0 || r.Rejected != 0 {
				t.Errorf("%s, %s: %d measured, %d HTTP errors (%s), %d never visible, %d rejected",
					c.name, mode, r.Measured, r.HTTPErrors, r.FirstErr, r.NeverVisible, r.Rejected)
			}
			if r.VerifyTotal != c.sample || r.Verified != r.VerifyVisible {
				t.Errorf("%s, %s: %d of %d sampled commands verified (%d visible): %s", c.name, mode, r.Verified, r.VerifyTotal, r.VerifyVisible, r.VerifyErr)
			}
			if r.Logs != "none" {
				t.Logf("%s, %s: warnings %s", c.name, mode, r.Logs)
			}
		}
		rp.Stop()
		ab.Stop()
	}
}
