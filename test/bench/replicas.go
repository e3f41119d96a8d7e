package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The replicas stage (-only replicas, not part of make bench) measures
// what a second replica costs: agentbus as make run configures it, on a
// nats-server over loopback TCP, once alone and once beside a second
// replica on the same server, in interleaved rounds (one then two, two
// then one, …), each on a fresh server, at -replicas-rate commands a
// second open loop, each a new order, the senders' connections split
// evenly between the replicas. Each replica processes the commands it
// took (the in-memory handoff) and appends to the same 32 shards of the
// order aggregates, so the two replicas' appends contend: each refused
// one is decided again (agentbus_command_conflicts_total, read from both
// replicas' metrics). The bench observes the events on a connection of
// its own to the server.

// replicaPair is two replicas on one server as one latency target: the
// senders' connections alternate between them.
type replicaPair struct{ a, b *abServer }

func (p *replicaPair) url() string                   { return p.a.URL }
func (p *replicaPair) urls() []string                { return []string{p.a.URL, p.b.URL} }
func (p *replicaPair) observer() (*nats.Conn, error) { return p.a.observer() }
func (p *replicaPair) logs() string {
	return "first: " + p.a.warns.Summary() + "; second: " + p.b.warns.Summary()
}

// replicated is a target of several replicas: sender w posts to urls()[w
// modulo their number].
type replicated interface{ urls() []string }

// senderURL is the base URL sender w of tg posts to.
func senderURL(tg target, w int) string {
	if r, ok := tg.(replicated); ok {
		us := r.urls()
		return us[w%len(us)]
	}
	return tg.url()
}

// conflictsOf reads agentbus_command_conflicts_total from a's metrics
// (the exposition parsed as Prometheus parses it).
func conflictsOf(a *abServer) (float64, error) {
	rec := httptest.NewRecorder()
	a.Server.Metrics().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		return 0, fmt.Errorf("metrics: %d", rec.Code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	f := fams["agentbus_command_conflicts_total"]
	if f == nil || len(f.GetMetric()) != 1 {
		return 0, fmt.Errorf("metrics: no agentbus_command_conflicts_total")
	}
	return f.GetMetric()[0].GetCounter().GetValue(), nil
}

// replicasSide starts one side of the stage: one replica, or two on one
// server; stop stops what it started.
func replicasSide(two, verbose bool) (tg target, reps []*abServer, stop func(), err error) {
	a, err := startAgentbusTCP(verbose)
	if err != nil {
		return nil, nil, nil, err
	}
	if !two {
		return a, []*abServer{a}, a.Stop, nil
	}
	b, err := startAgentbus(verbose, func(c *settings.Config) { c.NATS.URL = a.ext.ClientURL() })
	if err != nil {
		a.Stop()
		return nil, nil, nil, err
	}
	return &replicaPair{a, b}, []*abServer{a, b}, func() { b.Stop(); a.Stop() }, nil
}

// replicasStage runs the stage and adds its figures to rep.
func replicasStage(o options, rep *report) error {
	if o.replicasRate <= 0 || o.replicasDur <= 0 || o.clusterRounds < 1 {
		return fmt.Errorf("replicas: -replicas-rate and -replicas-duration must be positive, -cluster-rounds at least 1")
	}
	fmt.Printf("R. Replicas: agentbus alone, then beside a second replica, on one loopback nats-server over TCP; %d interleaved rounds\n", o.clusterRounds)
	fmt.Printf("   (one then two, then the other way round), each on a fresh server: %.0f commands/s open loop, each a new order\n", o.replicasRate)
	fmt.Printf("   (%s warm-up + %s measured), the senders split between the replicas; the observer connects to the server\n", o.rateWarm, o.replicasDur)
	runs := map[int][]latencyResult{}
	conflictsPerCmd := map[int][]float64{}
	lost := 0
	for round := 1; round <= o.clusterRounds; round++ {
		sides := []int{1, 2}
		if round%2 == 0 {
			slices.Reverse(sides)
		}
		for _, n := range sides {
			runtime.GC()
			waitQuiet()
			tg, reps, stop, err := replicasSide(n == 2, o.verbose)
			if err != nil {
				return err
			}
			r, err := runLatency(tg, o.replicasRate, o.rateWarm, o.replicasDur, o.visTimeout, o.rateWorkers, verifySample, nil)
			var conflicts float64
			for _, a := range reps {
				c, cerr := conflictsOf(a)
				if cerr != nil && err == nil {
					err = cerr
				}
				conflicts += c
			}
			stop()
			if err != nil {
				return err
			}
			sent := o.replicasRate * (o.rateWarm + o.replicasDur).Seconds() // scheduled: every one is sent (HTTP errors are reported)
			runs[n] = append(runs[n], r)
			conflictsPerCmd[n] = append(conflictsPerCmd[n], conflicts/sent)
			lost += r.NeverVisible
			fmt.Printf("   %d replica(s) #%d  p50 %s  p99 %s  max %s ms; 202 p99 %s ms; over %s %.2f %%; sent %.0f/s; not visible %d; HTTP errors %d; verified %d/%d; conflicts %.0f (%.3f a command); CPU %.2f cores (others %.2f)\n",
				n, round, fms(r.VisP50), fms(r.VisP99), fms(r.VisMax), fms(r.AckP99), latencyTarget, 100*r.VisOver,
				r.Achieved, r.NeverVisible, r.HTTPErrors, r.Verified, r.VerifyVisible, conflicts, conflicts/sent, r.CPU.Own, r.CPU.Others())
			if r.FirstErr != "" {
				fmt.Printf("      first HTTP error: %s\n", r.FirstErr)
			}
			if r.Logs != "none" {
				fmt.Printf("      agentbus warnings: %s\n", r.Logs)
			}
		}
	}
	one, _ := medianP99(runs[1])
	two, _ := medianP99(runs[2])
	perCmd := medianOf(conflictsPerCmd[2])
	fmt.Printf("   median rounds p50 / p99: one replica %s / %s, two %s / %s ms; conflicts a command with two (median): %.3f; not visible in all: %d\n",
		fms(one.VisP50), fms(one.VisP99), fms(two.VisP50), fms(two.VisP99), perCmd, lost)
	fmt.Println()
	rep.add("replicas.one.p50", ms(one.VisP50), "ms")
	rep.add("replicas.one.p99", ms(one.VisP99), "ms")
	rep.add("replicas.two.p50", ms(two.VisP50), "ms")
	rep.add("replicas.two.p99", ms(two.VisP99), "ms")
	rep.add("replicas.two.conflicts_per_command", perCmd, "conflicts")
	rep.add("replicas.never_visible", float64(lost), "commands")
	rep.row(fmt.Sprintf("replicas: cmd->visible p50 / p99 ms @%.0f/s, one / two replicas (median of %d)", o.replicasRate, o.clusterRounds),
		fmt.Sprintf("%s / %s, %s / %s", fms(one.VisP50), fms(one.VisP99), fms(two.VisP50), fms(two.VisP99)), "", "")
	rep.row("  conflicts a command with two replicas", fmt.Sprintf("%.3f", perCmd), "", "")
	return nil
}
