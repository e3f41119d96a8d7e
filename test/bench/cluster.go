package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The cluster latency stage measures what a round trip to NATS longer than
// loopback's does to agentbus: an R3 cluster across zones adds about a
// millisecond to every round trip between a client and the stream's
// leader. agentbus as make run configures it (startAgentbus's settings)
// runs against a nats-server on loopback TCP (startAgentbusDelayed),
// directly and through a delayProxy that adds -cluster-latency to every
// round trip (half each way), in interleaved rounds (direct then proxied,
// proxied then direct, …), each run on a fresh server: the capacity
// measurement (runCapacity), then the latency measurement (runLatency) at
// clusterRate commands a second, open loop. The bench observes the events
// on a connection of its own to the server, not through the proxy. Last,
// one run a side at clusterProbeRate, where nothing queues, measures the
// round trips on one command's path: the p50 the proxy adds, divided by
// the round trip it adds (pinged). A pipeline with no serial round trip
// per command keeps its capacity (clusterCapacityTarget) and its tail
// (clusterP99Target) when every round trip takes longer.

// clusterRate is the latency measurement's rate, commands a second.
const clusterRate = 2000

// clusterProbeRate and clusterProbeDuration are the one-at-a-time
// latency runs' (after a 1 s warm-up): 200 commands, 20 ms apart, so that
// nothing queues and the latency is the command's serial path.
const (
	clusterProbeRate     = 50
	clusterProbeDuration = 4 * time.Second
)

// clusterCapacityTarget is the least capacity, proxied / direct (medians).
const clusterCapacityTarget = 0.7

// clusterP99Target is the most command -> event visible p99 at clusterRate
// through the proxy (the median round's; of an even count, the worse of
// the two middle ones).
const clusterP99Target = 25 * time.Millisecond

// clusterSide is one side of the stage: direct (oneWay 0) or proxied.
type clusterSide struct {
	label  string
	oneWay time.Duration
}

func (s clusterSide) start(verbose bool) (*abServer, error) {
	return startAgentbusDelayed(verbose, s.oneWay)
}

// clusterStage runs the stage and adds its figures to rep.
func clusterStage(o options, rep *report) error {
	if o.clusterRTT/2 <= 0 || o.clusterRounds < 1 {
		return fmt.Errorf("cluster_latency: -cluster-latency must be positive and -cluster-rounds at least 1")
	}
	sidesOf := []clusterSide{{"direct", 0}, {"proxied", o.clusterRTT / 2}}
	fmt.Printf("C. Cluster latency: agentbus on a loopback nats-server over TCP, direct and through a proxy adding %s to every round trip\n", o.clusterRTT)
	fmt.Printf("   (%s each way, as an R3 cluster across zones adds); %d interleaved rounds (direct then proxied, then the other way round),\n", o.clusterRTT/2, o.clusterRounds)
	fmt.Printf("   each run on a fresh server: capacity (%d commands over %d connections, until every one is visible), then\n", o.capN, o.conns)
	fmt.Printf("   command -> event visible at %d commands/s open loop (%s warm-up + %s measured); the observer connects directly\n", clusterRate, o.rateWarm, o.rateDur)
	capacity := map[string][]float64{}
	cpu := map[string][]float64{}
	lat := map[string][]latencyResult{}
	var rttDirect, rttProxied []time.Duration
	var held []time.Duration
	lost := 0
	for round := 1; round <= o.clusterRounds; round++ {
		sides := slices.Clone(sidesOf)
		if round%2 == 0 {
			slices.Reverse(sides)
		}
		for _, side := range sides {
			runtime.GC()
			waitQuiet()
			ab, err := side.start(o.verbose)
			if err != nil {
				return err
			}
			if side.oneWay > 0 {
				d, p, err := probeRTT(ab, 100)
				if err != nil {
					ab.Stop()
					return err
				}
				rttDirect, rttProxied = append(rttDirect, d), append(rttProxied, p)
				fmt.Printf("   NATS round trip (median of 100 pings, idle): direct %.3f ms, through the proxy %.3f ms\n", ms(d), ms(p))
			}
			before := agentbusMsgs(ab)
			c, err := runCapacity(ab, o.capN, o.conns)
			stats := proxyStatsOf(ab)
			sent, got := agentbusMsgs(ab).since(before, o.capN)
			ab.Stop()
			if err != nil {
				return err
			}
			if c.NotVisible > 0 || c.Errors > 0 {
				return fmt.Errorf("cluster_latency: capacity %s #%d: %d errors (first: %s), %d not visible", side.label, round, c.Errors, c.FirstErr, c.NotVisible)
			}
			capacity[side.label] = append(capacity[side.label], c.Rate)
			cpu[side.label] = append(cpu[side.label], float64(c.CPUPerCmd)/1e3)
			fmt.Printf("   capacity %-11s %8.0f commands/s  %.0f µs CPU per command  (others %.2f cores); NATS messages per command: %.1f sent, %.1f received by agentbus%s\n",
				fmt.Sprintf("%s #%d", side.label, round), c.Rate, float64(c.CPUPerCmd)/1e3, c.CPU.Others(), sent, got, stats.text(o.capN))
		}
		for _, side := range sides {
			runtime.GC()
			waitQuiet()
			ab, err := side.start(o.verbose)
			if err != nil {
				return err
			}
			r, err := runLatency(ab, clusterRate, o.rateWarm, o.rateDur, o.visTimeout, o.rateWorkers, verifySample, nil)
			stats := proxyStatsOf(ab)
			ab.Stop()
			if err != nil {
				return err
			}
			if side.oneWay > 0 {
				held = append(held, stats.MeanHeld)
			}
			lat[side.label] = append(lat[side.label], r)
			lost += r.NeverVisible
			fmt.Printf("   latency  %-11s p50 %s  p99 %s  max %s ms; 202 p50 %s  p99 %s ms; over %s %.2f %%; sent %.0f/s; not visible %d; HTTP errors %d; verified %d/%d (others %.2f cores)%s\n",
				fmt.Sprintf("%s #%d", side.label, round), fms(r.VisP50), fms(r.VisP99), fms(r.VisMax), fms(r.AckP50), fms(r.AckP99), latencyTarget, 100*r.VisOver,
				r.Achieved, r.NeverVisible, r.HTTPErrors, r.Verified, r.VerifyVisible, r.CPU.Others(), stats.text(r.Measured))
			if r.FirstErr != "" {
				fmt.Printf("      first HTTP error: %s\n", r.FirstErr)
			}
			if r.Logs != "none" {
				fmt.Printf("      agentbus warnings: %s\n", r.Logs)
			}
		}
	}
	rtt := func(xs []time.Duration) float64 {
		f := make([]float64, len(xs))
		for i, x := range xs {
			f[i] = ms(x)
		}
		return medianOf(f)
	}
	// The serial round trips of one command: at a rate low enough that
	// nothing queues, the latency a longer round trip adds, in round trips.
	probe := map[string]latencyResult{}
	for _, side := range sidesOf {
		runtime.GC()
		waitQuiet()
		ab, err := side.start(o.verbose)
		if err != nil {
			return err
		}
		r, err := runLatency(ab, clusterProbeRate, time.Second, clusterProbeDuration, o.visTimeout, 8, 0, nil)
		ab.Stop()
		if err != nil {
			return err
		}
		probe[side.label] = r
		fmt.Printf("   one at a time (%d commands/s) %-8s p50 %s ms, 202 p50 %s ms; not visible %d\n", clusterProbeRate, side.label, fms(r.VisP50), fms(r.AckP50), r.NeverVisible)
	}
	added := rtt(rttProxied) - rtt(rttDirect)
	serialVis := (ms(probe["proxied"].VisP50) - ms(probe["direct"].VisP50)) / added
	serialAck := (ms(probe["proxied"].AckP50) - ms(probe["direct"].AckP50)) / added
	fmt.Printf("   serial round trips per command (p50 added / %.3f ms added per round trip, pinged): %.1f until visible, %.1f until the 202\n", added, serialVis, serialAck)
	capD, capP := medianOf(capacity["direct"]), medianOf(capacity["proxied"])
	ratio := capP / capD
	cpuD, cpuP := medianOf(cpu["direct"]), medianOf(cpu["proxied"])
	d, dP99s := upperMedianP99(lat["direct"])
	p, pP99s := upperMedianP99(lat["proxied"])
	capOK := ratio >= clusterCapacityTarget
	latOK := p.VisP99 <= clusterP99Target && lost == 0
	fmt.Printf("   capacity medians: direct %.0f, proxied %.0f commands/s: %.3f (target >= %.2f: %s); CPU per command %.0f / %.0f µs\n",
		capD, capP, ratio, clusterCapacityTarget, verdict(capOK), cpuD, cpuP)
	fmt.Printf("   at %d/s, p99 of the rounds: direct %s, proxied %s ms; median rounds p50 / p99: direct %s / %s, proxied %s / %s ms (target proxied p99 <= %s, none lost: %s)\n\n",
		clusterRate, strings.Join(dP99s, ", "), strings.Join(pP99s, ", "), fms(d.VisP50), fms(d.VisP99), fms(p.VisP50), fms(p.VisP99), clusterP99Target, verdict(latOK))
	rep.add("cluster_latency.capacity_ratio", ratio, "proxied/direct")
	rep.add("cluster_latency.capacity.direct", capD, "commands/s")
	rep.add("cluster_latency.capacity.proxied", capP, "commands/s")
	rep.add("cluster_latency.cpu_per_command.direct", cpuD, "µs")
	rep.add("cluster_latency.cpu_per_command.proxied", cpuP, "µs")
	rep.addLatency("cluster_latency.p99_at_2000", p.VisP99, o.visTimeout)
	rep.addLatency("cluster_latency.p50_at_2000", p.VisP50, o.visTimeout)
	rep.addLatency("cluster_latency.p99_at_2000.direct", d.VisP99, o.visTimeout)
	rep.addLatency("cluster_latency.p50_at_2000.direct", d.VisP50, o.visTimeout)
	rep.addLatency("cluster_latency.accepted_p50_at_2000", p.AckP50, o.visTimeout)
	rep.addLatency("cluster_latency.accepted_p50_at_2000.direct", d.AckP50, o.visTimeout)
	rep.add("cluster_latency.serial_round_trips", serialVis, "round trips until visible")
	rep.add("cluster_latency.serial_round_trips.accepted", serialAck, "round trips until 202")
	rep.add("cluster_latency.never_visible", float64(lost), "commands")
	rep.add("cluster_latency.rtt.direct", rtt(rttDirect), "ms")
	rep.add("cluster_latency.rtt.proxied", rtt(rttProxied), "ms")
	rep.add("cluster_latency.proxy_one_way", rtt(held), "ms")
	label := fmt.Sprintf("cluster latency +%s round trip", o.clusterRTT)
	rep.row(label+": capacity proxied / direct (medians)", fmt.Sprintf("%.3f (%.0f / %.0f /s)", ratio, capP, capD), fmt.Sprintf(">= %.2f", clusterCapacityTarget), verdict(capOK))
	rep.row(fmt.Sprintf("%s: cmd->visible p50 / p99 ms @%d/s, proxied (median of %d)", label, clusterRate, len(lat["proxied"])),
		fmt.Sprintf("%s / %s", fms(p.VisP50), fms(p.VisP99)), fmt.Sprintf("p99 <= %g", ms(clusterP99Target)), verdict(latOK))
	rep.row(fmt.Sprintf("  serial round trips per command at %d/s: until visible, until 202", clusterProbeRate), fmt.Sprintf("%.1f, %.1f", serialVis, serialAck), "", "")
	rep.row(fmt.Sprintf("  direct: cmd->visible p50 / p99 ms @%d/s (median of %d)", clusterRate, len(lat["direct"])), fmt.Sprintf("%s / %s", fms(d.VisP50), fms(d.VisP99)), "", "")
	return nil
}

// upperMedianP99 is medianP99 taking, of an even count of rounds, the
// upper of the two middle ones: of two rounds, the worse.
func upperMedianP99(runs []latencyResult) (latencyResult, []string) {
	_, p99s := medianP99(runs)
	byP99 := slices.Clone(runs)
	slices.SortFunc(byP99, byVisP99)
	return byP99[len(byP99)/2], p99s
}

// natsMsgs counts the messages agentbus's connections sent to the server
// and received from it.
type natsMsgs struct{ sent, got int64 }

// agentbusMsgs reads the server's counters of every client connection but
// the bench's own (the observer and the pings).
func agentbusMsgs(ab *abServer) natsMsgs {
	var m natsMsgs
	cz, err := ab.ext.Connz(&natsserver.ConnzOptions{Limit: 4096})
	if err != nil {
		return m
	}
	for _, c := range cz.Conns {
		if strings.HasPrefix(c.Name, "bench-") {
			continue
		}
		m.sent += c.InMsgs
		m.got += c.OutMsgs
	}
	return m
}

// since is the messages per command of n commands since before.
func (m natsMsgs) since(before natsMsgs, n int) (sent, got float64) {
	return float64(m.sent-before.sent) / float64(n), float64(m.got-before.got) / float64(n)
}

// proxyStatsOf is what ab's proxy measured; zero without one.
func proxyStatsOf(ab *abServer) proxyStats {
	if ab.proxy == nil {
		return proxyStats{}
	}
	return ab.proxy.Stats()
}

// text says, for a proxied run of n commands, how long chunks were held
// and how many passed per command; "" for a direct run.
func (s proxyStats) text(n int) string {
	if s.Chunks == 0 {
		return ""
	}
	return fmt.Sprintf("; proxy: %.1f writes per command, held %.3f ms (late %.3f, at most %.1f ms)",
		float64(s.Chunks)/float64(max(n, 1)), ms(s.MeanHeld), ms(s.MeanLate), ms(s.MaxLate))
}

// probeRTT measures the median NATS round trip (PING/PONG) of n pings to
// ab's server, directly and through its proxy.
func probeRTT(ab *abServer, n int) (direct, proxied time.Duration, err error) {
	median := func(url string) (time.Duration, error) {
		nc, err := nats.Connect(url, nats.Name("bench-rtt"))
		if err != nil {
			return 0, err
		}
		defer nc.Close()
		rtts := make([]time.Duration, 0, n)
		for range n {
			d, err := nc.RTT()
			if err != nil {
				return 0, err
			}
			rtts = append(rtts, d)
		}
		return percentiles(rtts, 0.5)[0], nil
	}
	if direct, err = median(ab.ext.ClientURL()); err != nil {
		return 0, 0, err
	}
	proxied, err = median("nats://" + ab.proxy.Addr())
	return direct, proxied, err
}
