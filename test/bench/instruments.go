package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/pkg/tracing"
)

// The instruments stage measures what metrics and tracing cost with the
// exporter off, the default: the ingest measurement (abIngest) and the
// capacity measurement (abCapacity) against agentbus as make run
// configures it (A: ops.metrics on, W3C trace context carried, no OTLP
// exporter) and against agentbus without them (B: ops.metrics false,
// OTEL_PROPAGATORS=none), in interleaved rounds A, B, A, B, … each on a
// fresh server, the order turned round every other round (A B, B A, …)
// so that a drift of the machine over the stage weighs on both sides. The
// figures are the medians of the rounds' ratios, A / B of one round each
// (a pair run back to back); the target is at least instrumentsTarget for
// both.

// instrumentsTarget is the least ratio, instrumented / uninstrumented, of
// ingest and of capacity: metrics and tracing cost under 3 %.
const instrumentsTarget = 0.97

// instrumented is one side of the stage.
type instrumented struct {
	label string
	on    bool // metrics kept and trace context carried
}

// use makes the process carry trace context (on) or not, through
// tracing.Setup as agentbus serve reads OTEL_PROPAGATORS, and returns the
// settings of the side. It refuses to measure with an exporter on.
func (s instrumented) use() (func(*settings.Config), error) {
	var err error
	if s.on {
		err = os.Unsetenv("OTEL_PROPAGATORS")
	} else {
		err = os.Setenv("OTEL_PROPAGATORS", tracing.PropagatorNone)
	}
	if err != nil {
		return nil, err
	}
	exporting, _, err := tracing.Setup(context.Background(), "bench")
	if err != nil {
		return nil, err
	}
	if exporting {
		return nil, fmt.Errorf("instruments: an OTLP exporter is configured (OTEL_EXPORTER_OTLP_*): the stage measures with the exporter off")
	}
	if tracing.Propagating() != s.on {
		return nil, fmt.Errorf("instruments: %s: trace context carried %v", s.label, tracing.Propagating())
	}
	return func(c *settings.Config) { c.Ops.Metrics = s.on }, nil
}

var instrumentSides = []instrumented{
	{label: "instrumented", on: true},
	{label: "uninstrumented", on: false},
}

// instrumentsStage runs the stage and adds its figures to rep, posting
// the bodies of src in the ingest runs.
func instrumentsStage(o options, src *bodies, rep *report) error {
	fmt.Printf("I. Instruments: what metrics and tracing (exporter off) cost; %d interleaved rounds of agentbus as make run configures it\n", o.instRounds)
	fmt.Printf("   (instrumented: ops.metrics on, trace context carried) and without them (uninstrumented: ops.metrics false,\n")
	fmt.Printf("   OTEL_PROPAGATORS=none), each run on a fresh server: ingest (%d connections, %s warm-up + %s measured),\n", o.conns, o.warmup, o.dur)
	fmt.Printf("   then capacity (%d commands until every one is visible)\n", o.capN)
	defer func() { // this process carries trace context again, as the other stages expect
		_ = os.Unsetenv("OTEL_PROPAGATORS")
		_, _, _ = tracing.Setup(context.Background(), "bench")
	}()
	ingest := map[bool][]float64{}
	capacity := map[bool][]float64{}
	cpu := map[bool][]float64{}
	for round := 1; round <= o.instRounds; round++ {
		sides := slices.Clone(instrumentSides)
		if round%2 == 0 {
			slices.Reverse(sides)
		}
		for _, side := range sides {
			mutate, err := side.use()
			if err != nil {
				return err
			}
			runtime.GC()
			waitQuiet()
			r, err := abIngest(o, src, fmt.Sprintf("%s #%d", side.label, round), "", mutate)
			if err != nil {
				return err
			}
			ingest[side.on] = append(ingest[side.on], r.RPS)
			fmt.Printf("   ingest   %-18s %8.0f req/s  p50 %.2f ms  p99 %.2f ms  cpu %.2f cores (others %.2f)\n",
				r.Label, r.RPS, ms(r.P50), ms(r.P99), r.CPU.Own, r.CPU.Others())
		}
		for _, side := range sides {
			mutate, err := side.use()
			if err != nil {
				return err
			}
			runtime.GC()
			waitQuiet()
			c, err := abCapacity(o, "", mutate)
			if err != nil {
				return err
			}
			if c.NotVisible > 0 || c.Errors > 0 {
				return fmt.Errorf("instruments: capacity %s #%d: %d errors (first: %s), %d not visible", side.label, round, c.Errors, c.FirstErr, c.NotVisible)
			}
			capacity[side.on] = append(capacity[side.on], c.Rate)
			cpu[side.on] = append(cpu[side.on], float64(c.CPUPerCmd)/1e3)
			fmt.Printf("   capacity %-18s %8.0f commands/s  %.0f µs CPU per command  (others %.2f cores)\n",
				fmt.Sprintf("%s #%d", side.label, round), c.Rate, float64(c.CPUPerCmd)/1e3, c.CPU.Others())
		}
	}
	ingOn, ingOff := medianOf(ingest[true]), medianOf(ingest[false])
	capOn, capOff := medianOf(capacity[true]), medianOf(capacity[false])
	cpuOn, cpuOff := medianOf(cpu[true]), medianOf(cpu[false])
	ingRatio, capRatio := medianOf(ratios(ingest)), medianOf(ratios(capacity))
	fmt.Printf("   medians: ingest %.0f / %.0f req/s, of the rounds' ratios %.3f; capacity %.0f / %.0f commands/s, of the rounds' ratios %.3f; CPU per command %.0f / %.0f µs\n\n",
		ingOn, ingOff, ingRatio, capOn, capOff, capRatio, cpuOn, cpuOff)
	rep.add("instruments.ingest_ratio", ingRatio, "instrumented/uninstrumented")
	rep.add("instruments.capacity_ratio", capRatio, "instrumented/uninstrumented")
	rep.add("instruments.ingest.instrumented", ingOn, "req/s")
	rep.add("instruments.ingest.uninstrumented", ingOff, "req/s")
	rep.add("instruments.capacity.instrumented", capOn, "commands/s")
	rep.add("instruments.capacity.uninstrumented", capOff, "commands/s")
	rep.add("instruments.capacity.cpu_per_command.instrumented", cpuOn, "µs")
	rep.add("instruments.capacity.cpu_per_command.uninstrumented", cpuOff, "µs")
	target := fmt.Sprintf(">= %.2f", instrumentsTarget)
	rep.row("metrics and tracing: ingest, instrumented / uninstrumented", fmt.Sprintf("%.3f", ingRatio), target, verdict(ingRatio >= instrumentsTarget))
	rep.row("metrics and tracing: capacity, instrumented / uninstrumented", fmt.Sprintf("%.3f", capRatio), target, verdict(capRatio >= instrumentsTarget))
	return nil
}

// ratios are the rounds' ratios of by's figures, instrumented (true) /
// uninstrumented (false), round by round.
func ratios(by map[bool][]float64) []float64 {
	out := make([]float64, 0, len(by[true]))
	for i := range min(len(by[true]), len(by[false])) {
		out = append(out, by[true][i]/by[false][i])
	}
	return out
}

// medianOf is the median of xs (the mean of the two middle ones for an
// even count); 0 for none.
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
