// Command bench measures agentbus beside a bare reference on this machine, in
// one run: command ingest (POST /commands) against Echo + gojsonschema +
// JetStream publish, command -> event-visible latency at a fixed rate,
// correlation lookups with a million stored events, and the cost of
// `sync always`. `make bench` runs it; see README.md here.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/server/host"
	"github.com/agentbus/agentbus/pkg/settings"
)

type options struct {
	conns         int
	warmup, dur   time.Duration
	rounds        int
	rate          float64
	rateWarm      time.Duration
	rateDur       time.Duration
	sustained     time.Duration
	bare          bool // latency: bare reference pipeline rounds beside agentbus's
	visTimeout    time.Duration
	rateWorkers   int
	million       bool
	capN          int
	millionN      int
	millionWindow int
	lookups       int
	millionLimit  time.Duration
	sync          bool
	memN          int
	diag          bool
	only          string
	profIngest    string
	profLatency   string
	traceLatency  string
	memLatency    string
	latRounds     int
	profCapacity  string
	profWebhooks  string
	verbose       bool
	child         bool
	memory        string // memory.mode of this process
	rssN          int
	pushSessions  int
	pushSSE       int
	pushRate      float64
	pushDur       time.Duration
	soak          soakOptions
	restart       restartOptions
	stores        storesOptions
	storeOptions  storeOptionsOptions
	aggregates    aggregatesOptions
	instRounds    int
	clusterRTT    time.Duration
	clusterRounds int
	replicasRate  float64
	replicasDur   time.Duration
}

// plan is the runtime's memory plan in this process.
var plan host.RuntimePlan

func main() {
	var o options
	flag.IntVar(&o.conns, "conns", 64, "ingest: concurrent keep-alive connections (one worker each)")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "ingest: warm-up before measuring, per run")
	flag.DurationVar(&o.dur, "duration", 5*time.Second, "ingest: measured window per run")
	flag.IntVar(&o.rounds, "rounds", 2, "ingest: rounds of (reference, agentbus, agentbus ingest-only), run in that order; also the rounds of the auth stage and of -only agentbus")
	flag.Float64Var(&o.rate, "rate", 5000, "latency: commands per second (open loop)")
	flag.IntVar(&o.latRounds, "latency-rounds", 3, "latency: rounds, each on a fresh agentbus; the round with the median p99 is the stage's figure")
	flag.DurationVar(&o.rateWarm, "rate-warmup", time.Second, "latency: warm-up at the same rate, not measured")
	flag.DurationVar(&o.rateDur, "rate-duration", 5*time.Second, "latency: measured sending time")
	flag.BoolVar(&o.bare, "bare", true, "latency: beside each round (before it in odd rounds, after it in even ones; before the sustained one), a round of the bare reference pipeline (refpipe.go) at the same rate, for comparison")
	flag.DurationVar(&o.sustained, "sustained", 30*time.Second, "latency: after the judged rounds, one round this long at the same rate, judged on its own summary row (0: none)")
	flag.DurationVar(&o.visTimeout, "visible-timeout", 5*time.Second, "latency: a command not visible this long after its send is counted as never visible")
	flag.IntVar(&o.rateWorkers, "rate-workers", 256, "latency: sender goroutines (and max connections)")
	flag.IntVar(&o.capN, "capacity-n", 20000, "capacity: commands submitted and followed to the end (also the instruments stage's capacity runs)")
	flag.IntVar(&o.instRounds, "instruments-rounds", 5, "instruments: interleaved rounds (A B, then B A, …) of agentbus with and without metrics and trace context (ingest, then capacity, each side)")
	flag.DurationVar(&o.clusterRTT, "cluster-latency", time.Millisecond, "cluster_latency: time the proxy adds to every NATS round trip (half each way)")
	flag.Float64Var(&o.replicasRate, "replicas-rate", 2000, "replicas: commands per second, split between the replicas")
	flag.DurationVar(&o.replicasDur, "replicas-duration", 20*time.Second, "replicas: measured sending time of each run (after -rate-warmup); the rounds are -cluster-rounds")
	flag.IntVar(&o.clusterRounds, "cluster-rounds", 2, "cluster_latency: interleaved rounds (direct then proxied, then the other way round), each with a capacity and a latency run per side")
	flag.BoolVar(&o.million, "million", true, "run the correlation-lookup stage with 1,000,000 stored events")
	flag.IntVar(&o.millionN, "million-n", 1_000_000, "events to seed in the lookup stage")
	flag.IntVar(&o.millionWindow, "million-window", 4096, "seed: max unacknowledged async publishes")
	flag.IntVar(&o.lookups, "lookups", 500, "lookup stage: commands looked up, per store state")
	flag.DurationVar(&o.millionLimit, "million-limit", 90*time.Second, "lookup stage: stop seeding after this long (reported)")
	flag.BoolVar(&o.sync, "sync", true, "run the sync-always ingest stage")
	flag.IntVar(&o.memN, "memory-n", 100000, "memory: commands submitted, each on a new aggregate")
	flag.BoolVar(&o.diag, "diag", false, "diagnostics: also run agentbus ingest with NATS over loopback TCP instead of in-process (the processor-off run is in every ingest round)")
	flag.StringVar(&o.only, "only", "", "comma-separated stages to run: ingest,auth,capacity,instruments,latency,cluster_latency,million,sync,memory,rss,webhooks,push (default: all); agentbus = agentbus ingest runs only (for A/B comparisons); soak = make soak, restart = start time and memory with a long log, replicas = one replica against two on one server, stores = Pebble against bbolt for the on-disk read models, store_options = Pebble's options for the read models' store and aggregates = what an aggregate costs the NATS server, by subject layout (only when named)")
	flag.StringVar(&o.profIngest, "cpuprofile-ingest", "", "write a CPU profile of the last agentbus ingest window to this file")
	flag.StringVar(&o.profLatency, "cpuprofile-latency", "", "write a CPU profile of an extra latency round (not counted), from its measured sends until its last command is visible or the visibility timeout, to this file")
	flag.StringVar(&o.traceLatency, "trace-latency", "", "write an execution trace (go tool trace) of an extra latency round (not counted), from its measured sends until its last command is visible or the visibility timeout, to this file")
	flag.StringVar(&o.memLatency, "memprofile-latency", "", "write heap profiles (in use and allocated) at the start (FILE.base) and the end (FILE) of an extra latency round (not counted), its measured sends until its last command is visible or the visibility timeout; go tool pprof -base FILE.base FILE shows the window alone")
	flag.DurationVar(&quietBudget, "quiet-wait", 60*time.Second, "total time the bench may wait, before runs, for other processes on the machine to go quiet")
	flag.StringVar(&visibleMode, "visible", "core", "latency: how the events that make commands visible are observed: core (a core-NATS subscription, as published) or watch (an ordered JetStream consumer, as stored)")
	flag.StringVar(&dumpPath, "latency-csv", "", "write every command's latency-stage timings to this CSV file")
	flag.StringVar(&o.profCapacity, "cpuprofile-capacity", "", "write a CPU profile of the capacity run to this file")
	flag.StringVar(&o.profWebhooks, "cpuprofile-webhooks", "", "write a CPU profile of the webhook stage's throughput round (10 subscriptions, as fast as accepted) to this file")
	flag.BoolVar(&o.verbose, "v", false, "print agentbus warnings as they happen")
	flag.StringVar(&o.memory, "memory-mode", settings.MemoryLargeHeap, "the memory plan (memory.mode) of the process every stage runs in, the reference's too: large-heap (the bench's, for the latency tail) or budget (agentbus's default); the rss stage runs both")
	flag.IntVar(&o.rssN, "rss-n", 30000, "rss: commands submitted in each memory mode")
	flag.IntVar(&o.pushSessions, "push-sessions", 100, "push: MCP sessions held")
	flag.IntVar(&o.pushSSE, "push-sse", 100, "push: SSE listeners held beside them")
	flag.Float64Var(&o.pushRate, "push-rate", 500, "push: commands per second, through the MCP sessions' typed tool")
	flag.DurationVar(&o.pushDur, "push-duration", 5*time.Second, "push: sending time")
	flag.StringVar(&o.soak.bin, "soak-agentbus", "bin/agentbus", "soak: the agentbus binary run as make run runs it (make build makes it)")
	flag.Float64Var(&o.soak.rate, "soak-rate", 2000, "soak: commands per second, each on a new order (SOAK_RATE)")
	flag.Float64Var(&o.soak.minutes, "soak-minutes", 30, "soak: sending time in minutes (SOAK_MINUTES)")
	flag.IntVar(&o.soak.workers, "soak-workers", 256, "soak: sender goroutines, one keep-alive connection each")
	flag.IntVar(&o.soak.sample, "soak-lookups", 200, "soak: commands of the first minute looked up with GET /events?correlationId= at the end")
	flag.DurationVar(&o.soak.drain, "soak-drain", 2*time.Minute, "soak: after the last send, how long to wait for the events still missing")
	flag.StringVar(&o.soak.pprofDir, "soak-pprof", "", "soak: turn ops.pprof on and write agentbus's allocations, a 5-s execution trace and a 10-s CPU profile to this directory (a departure from make run's settings)")
	flag.StringVar(&o.soak.settings, "soak-settings", "", "soak: YAML added to agentbus's configuration, e.g. 'processor: {handoff: false}' (a departure from make run's settings, printed)")
	flag.DurationVar(&o.soak.profileAt, "soak-profile-at", 90*time.Second, "soak: when, after the first send, -soak-pprof takes its profiles")
	flag.DurationVar(&o.soak.bare, "soak-bare", time.Minute, "soak: before agentbus starts, run the bare reference pipeline at -soak-rate for this long, the box's figures in the same sitting (0: not run)")
	flag.BoolVar(&o.soak.cpuMinute, "soak-cpu-minutes", false, "soak: with -soak-pprof, also a CPU profile of every minute of sends, cpu-minute-NN.pb.gz (instead of the one 10-s CPU profile)")
	flag.IntVar(&o.restart.n, "restart-n", 10_000_000, "restart: events in the log at the second start (the first command's through the pipeline, the others published in its event's shape)")
	flag.DurationVar(&o.restart.limit, "restart-limit", 20*time.Minute, "restart: stop seeding after this long (reported; the events seeded by then are the log)")
	flag.StringVar(&o.restart.bin, "restart-agentbus", "", "restart: the agentbus binary (default: go build ./cmd/agentbus into the stage's temp dir)")
	flag.StringVar(&o.restart.pprofDir, "restart-pprof", "", "restart: start agentbus a third time on the seeded log with ops.pprof on and write a CPU profile of its start and its live heap once ready to this directory")
	flag.IntVar(&o.restart.profileS, "restart-profile-seconds", 10, "restart: seconds of -restart-pprof's CPU profile, from the start")
	flag.BoolVar(&o.restart.keep, "restart-keep", false, "restart: keep the stage's directory (the seeded data dir, the agentbus logs) and print its path, for a look at the stores afterwards")
	flag.DurationVar(&o.restart.readyWait, "restart-ready-timeout", 10*time.Minute, "restart: a start not ready this long ends the stage")
	flag.IntVar(&o.stores.records, "stores-records", 2_000_000, "stores: events written to each store (a correlation record and a type-index key each)")
	flag.IntVar(&o.aggregates.n, "aggregates-n", 10_000_000, "aggregates: events stored in each subject layout, each of a new aggregate")
	flag.IntVar(&o.aggregates.lookups, "aggregates-lookups", 100_000, "aggregates: lookups in the aggregate index, of aggregates written and of aggregates never written")
	flag.IntVar(&o.storeOptions.commands, "store-options-commands", 1_600_000, "store_options: new commands each variant of the read models' store takes")
	flag.Float64Var(&o.storeOptions.rate, "store-options-rate", 12_000, "store_options: commands a second")
	flag.StringVar(&o.storeOptions.variants, "store-options-variants", "", "store_options: comma-separated variants (as_is, cache_less_memtables, no_compression, l0_at_2, memtable_3mib, memtable_12mib; default all)")
	flag.StringVar(&o.stores.engine, "stores-engine", "", "internal: the one store (pebble or bbolt) the stores stage measures in this process")
	flag.BoolVar(&o.child, "stage-child", false, "internal: run the one stage -only names as part of a whole bench, ending with a machine-readable report instead of the summary")
	flag.Parse()
	if flag.NArg() > 0 {
		// The stage processes get this program's arguments with their own
		// flags after them; a positional argument would hide those.
		fmt.Fprintf(os.Stderr, "bench: unexpected argument %q (every setting is a flag; see -h)\n", flag.Arg(0))
		os.Exit(2)
	}
	if o.latRounds < 1 || o.rounds < 1 || o.memN < 1 || o.rssN < 1 || o.instRounds < 1 {
		fmt.Fprintln(os.Stderr, "bench: -rounds, -latency-rounds, -instruments-rounds, -memory-n and -rss-n must be at least 1")
		os.Exit(2)
	}
	mem := settings.Memory{Mode: o.memory}
	if mem.Mode != settings.MemoryLargeHeap && mem.Mode != settings.MemoryBudget {
		fmt.Fprintf(os.Stderr, "bench: -memory-mode %q: must be %s or %s\n", o.memory, settings.MemoryLargeHeap, settings.MemoryBudget)
		os.Exit(2)
	}
	// The runtime settings the agentbus binary runs with (cmd/agentbus) in
	// the mode chosen; the reference in this process gets them too.
	plan = host.TuneRuntime(mem, slog.New(slog.DiscardHandler))
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func (o options) stage(name string) bool {
	if o.only == "" {
		return true
	}
	return slices.Contains(strings.Split(o.only, ","), name)
}

// figure is one machine-readable result.
type figure struct {
	Figure string  `json:"figure"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Note   string  `json:"note,omitempty"`
}

type report struct {
	figures []figure
	summary [][]string // figure, value, target, verdict
}

func (r *report) add(name string, v float64, unit string) {
	r.figures = append(r.figures, figure{Figure: name, Value: v, Unit: unit})
}

// addLatency records a latency in ms, or -1 with a note when it did not
// happen within timeout.
func (r *report) addLatency(name string, d, timeout time.Duration) {
	if d == never {
		r.figures = append(r.figures, figure{Figure: name, Value: -1, Unit: "ms", Note: "not within " + timeout.String()})
		return
	}
	r.add(name, ms(d), "ms")
}

func (r *report) row(cols ...string) { r.summary = append(r.summary, cols) }

func run(o options) error {
	began := time.Now()
	commit := "unknown"
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	if !o.child {
		fmt.Printf("agentbus bench  %s  nproc=%d GOMAXPROCS=%d %s %s/%s  commit %s  loadavg %s\n",
			began.Format(time.RFC3339), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, commit, loadAvg())
		fmt.Printf("memory mode %s (-memory-mode): %s; the rss stage compares it with the other mode\n\n", o.memory, planText(plan))
	}
	rep := &report{}

	stages := o.stages()
	if o.isolate(stages) {
		if err := runIsolated(o, stages, rep); err != nil {
			return err
		}
	} else {
		for _, st := range stages { // just one: several run in processes of their own
			if err := runStage(o, st, rep); err != nil {
				return err
			}
		}
		if o.child {
			return writeChildReport(rep)
		}
	}
	printReport(rep)
	fmt.Printf("\ntotal bench time %s, loadavg at end %s\n", time.Since(began).Round(100*time.Millisecond), loadAvg())
	return nil
}

// runStage runs one stage in this process and adds its figures to rep.
func runStage(o options, stage string, rep *report) error {
	// Enough distinct bodies for the fastest server: 60k req/s.
	ingestBodies := func() *bodies { return newBodies("ing", int(60000*(o.warmup+o.dur).Seconds())) }
	switch stage {
	case "ingest":
		return ingestStage(o, ingestBodies(), rep)
	case "auth": // cost of authentication on ingest (auth.go)
		return authStage(o, ingestBodies(), rep)
	case "agentbus": // A/B helper: agentbus ingest runs only
		src := ingestBodies()
		for round := 1; round <= o.rounds; round++ {
			runtime.GC()
			waitQuiet()
			r, err := abIngest(o, src, fmt.Sprintf("agentbus #%d", round), "")
			if err != nil {
				return err
			}
			fmt.Printf("   %-14s %8.0f req/s  p50 %.2f ms  p99 %.2f ms  cpu %.2f cores (others %.2f)  %s\n", r.Label, r.RPS, ms(r.P50), ms(r.P99), r.CPU.Own, r.CPU.Others(), r.Processed)
		}
		return nil
	case "capacity":
		return capacityStage(o, rep)
	case "instruments": // what metrics and tracing cost (instruments.go)
		return instrumentsStage(o, ingestBodies(), rep)
	case "latency":
		return latencyStage(o, rep)
	case "cluster_latency": // NATS round trips made longer (cluster.go)
		return clusterStage(o, rep)
	case "replicas": // a second replica on the same server (replicas.go)
		return replicasStage(o, rep)
	case "million":
		if !o.million {
			fmt.Println("3. Correlation lookup with 1M events: skipped (-million=false)")
			fmt.Println()
			return nil
		}
		return millionStage(o, rep)
	case "sync":
		return syncStage(o, ingestBodies(), rep)
	case "memory":
		return memoryStage(o, rep)
	case "rss":
		return rssStage(o, rep)
	case "webhooks":
		return webhookStage(o, rep)
	case "push":
		return pushStage(o, rep)
	case "soak":
		return soakStage(o.soak, rep)
	case "restart":
		ro := o.restart
		ro.window, ro.lookups = o.millionWindow, o.lookups
		return restartStage(ro, rep)
	case "stores": // Pebble against bbolt for the on-disk read models (stores.go)
		return storesStage(o.stores, rep)
	case "aggregates": // what an aggregate costs the NATS server (aggregates.go)
		return aggregatesStage(o.aggregates, rep)
	case "store_options": // Pebble's options for the read models' store (storeoptions.go)
		return storeOptionsStage(o.storeOptions, rep)
	}
	return fmt.Errorf("unknown stage %q", stage)
}

// printReport prints the summary table and the machine-readable figures.
func printReport(rep *report) {
	fmt.Println("Summary")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tvalue\ttarget\tverdict\t")
	for _, r := range rep.summary {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
	fmt.Println()
	for _, f := range rep.figures {
		b, _ := json.Marshal(f)
		fmt.Printf("BENCH %s\n", b)
	}
}

func ingestLine(tw *tabwriter.Writer, r loadResult) {
	fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%.1f\t%d\t%.2f / %.2f\t%s\t\n", r.Label, r.RPS, ms(r.P50), ms(r.P99), ms(r.Max), r.Errors, r.CPU.Own, r.CPU.Others(), r.Processed)
}

func ingestHeader(tw *tabwriter.Writer) {
	fmt.Fprintln(tw, "run\treq/s\tp50 ms\tp99 ms\tmax ms\terrors\tCPU cores bench/others\tpipeline at window end\t")
}

func checkLoad(r loadResult) error {
	if r.Wrapped > 0 {
		return fmt.Errorf("%s: ran out of distinct bodies (%d reused); raise the pool size", r.Label, r.Wrapped)
	}
	if r.Errors > 0 {
		fmt.Printf("  !! %s: %d errors, first: %s\n", r.Label, r.Errors, r.FirstErr)
	}
	return nil
}

// abIngest runs one closed-loop ingest against a fresh agentbus.
func abIngest(o options, src *bodies, label, profile string, mutate ...func(*settings.Config)) (loadResult, error) {
	return abIngestWith(startAgentbus, o, src, label, profile, nil, mutate...)
}

// abIngestWith is abIngest on an agentbus started by start; cred, when
// set, gives the header every request carries (name, value).
func abIngestWith(start func(bool, ...func(*settings.Config)) (*abServer, error), o options, src *bodies, label, profile string,
	cred func(*abServer) (string, string, error), mutate ...func(*settings.Config)) (loadResult, error) {
	ab, err := start(o.verbose, mutate...)
	if err != nil {
		return loadResult{}, err
	}
	defer ab.Stop()
	var hdr []string
	if cred != nil {
		name, value, err := cred(ab)
		if err != nil {
			return loadResult{}, fmt.Errorf("%s: credential: %w", label, err)
		}
		if name != "" {
			hdr = []string{name, value}
		}
	}
	var stop func()
	if profile != "" {
		stop = startProfile(profile, o.warmup)
	}
	r := closedLoop(label, ab.URL+"/commands", src, o.conns, o.warmup, o.dur, hdr...)
	if stop != nil {
		stop()
	}
	r.Processed = pipelineState(ab)
	if l := ab.logs(); l != "none" {
		fmt.Printf("  agentbus warnings during %s: %s\n", label, l)
	}
	return r, checkLoad(r)
}

// pipelineState says how many commands and events agentbus had stored.
func pipelineState(ab *abServer) string {
	ctx := context.Background()
	names := natsjs.NamesFor("agentbus")
	var cmds, evts uint64
	if s, err := ab.Conn.JS.Stream(ctx, names.Commands); err == nil {
		cmds = s.CachedInfo().State.Msgs
	}
	if s, err := ab.Conn.JS.Stream(ctx, names.Events); err == nil {
		evts = s.CachedInfo().State.Msgs
	}
	return fmt.Sprintf("%d commands, %d events stored", cmds, evts)
}

// startProfile starts a CPU profile after delay (the warm-up) and returns
// the function that stops it.
func startProfile(path string, delay time.Duration) func() {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: profile:", err)
		return nil
	}
	started := make(chan bool, 1)
	timer := time.AfterFunc(delay, func() { started <- pprof.StartCPUProfile(f) == nil })
	return func() {
		timer.Stop()
		select {
		case ok := <-started:
			if ok {
				pprof.StopCPUProfile()
			}
		default:
		}
		f.Close()
		fmt.Printf("  CPU profile written to %s\n", path)
	}
}

// startTrace starts an execution trace and returns the function that
// stops it.
func startTrace(path string) func() {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: trace:", err)
		return nil
	}
	if err := trace.Start(f); err != nil {
		fmt.Fprintln(os.Stderr, "bench: trace:", err)
		f.Close()
		return nil
	}
	return func() {
		trace.Stop()
		f.Close()
		fmt.Printf("  execution trace written to %s\n", path)
	}
}

// writeHeapProfile writes the heap profile (in-use and allocated since the
// start) to path, after a collection: the profile counts what was
// allocated up to the last one.
func writeHeapProfile(path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: heap profile:", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, "bench: heap profile:", err)
		return
	}
	fmt.Printf("  heap profile written to %s\n", path)
}

func ingestStage(o options, src *bodies, rep *report) error {
	fmt.Printf("1. Ingest: POST /commands (valid place-order/1.0 envelopes, distinct ids), %d keep-alive connections,\n", o.conns)
	fmt.Printf("   %s warm-up + %s measured per run; reference and agentbus alternated, each on a fresh embedded nats-server\n", o.warmup, o.dur)
	var refs, abs, offs []loadResult
	var results []loadResult
	for round := 1; round <= o.rounds; round++ {
		runtime.GC()
		waitQuiet()
		ref, err := startReference()
		if err != nil {
			return err
		}
		r := closedLoop(fmt.Sprintf("reference #%d", round), ref.URL+"/commands", src, o.conns, o.warmup, o.dur)
		ref.Stop()
		if err := checkLoad(r); err != nil {
			return err
		}
		refs = append(refs, r)
		results = append(results, r)
		fmt.Printf("   %-14s %8.0f req/s  p50 %.2f ms  p99 %.2f ms  cpu %.2f cores (others %.2f)\n", r.Label, r.RPS, ms(r.P50), ms(r.P99), r.CPU.Own, r.CPU.Others())

		runtime.GC()
		waitQuiet()
		profile := ""
		if round == o.rounds {
			profile = o.profIngest
		}
		a, err := abIngest(o, src, fmt.Sprintf("agentbus #%d", round), profile)
		if err != nil {
			return err
		}
		abs = append(abs, a)
		results = append(results, a)
		fmt.Printf("   %-14s %8.0f req/s  p50 %.2f ms  p99 %.2f ms  cpu %.2f cores (others %.2f)  %s\n", a.Label, a.RPS, ms(a.P50), ms(a.P99), a.CPU.Own, a.CPU.Others(), a.Processed)

		// The same replica with processing off: the ingest path alone, as on
		// an HTTP-only replica whose commands other replicas process.
		runtime.GC()
		waitQuiet()
		off, err := abIngest(o, src, fmt.Sprintf("ingest-only #%d", round), "", func(c *settings.Config) { c.Processor.Disabled = true })
		if err != nil {
			return err
		}
		offs = append(offs, off)
		results = append(results, off)
		fmt.Printf("   %-14s %8.0f req/s  p50 %.2f ms  p99 %.2f ms  cpu %.2f cores (others %.2f)  %s\n", off.Label, off.RPS, ms(off.P50), ms(off.P99), off.CPU.Own, off.CPU.Others(), off.Processed)
	}
	if o.diag {
		runtime.GC()
		waitQuiet()
		t, err := abIngestWith(startAgentbusTCP, o, src, "agentbus, NATS over TCP", "", nil)
		if err != nil {
			return err
		}
		results = append(results, t)
		rep.add("ingest.agentbus_nats_tcp.rps", t.RPS, "req/s")
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	ingestHeader(tw)
	for _, r := range results {
		ingestLine(tw, r)
	}
	bestRef, bestAB := best(refs), best(abs)
	medRef, medAB := median(refs), median(abs)
	tw.Flush()
	ratioBest, ratioMed := bestAB.RPS/bestRef.RPS, medAB.RPS/medRef.RPS
	fmt.Printf("\n   best:   reference %.0f req/s (p99 %.2f ms), agentbus %.0f req/s (p99 %.2f ms)\n", bestRef.RPS, ms(bestRef.P99), bestAB.RPS, ms(bestAB.P99))
	fmt.Printf("   median: reference %.0f req/s, agentbus %.0f req/s\n", medRef.RPS, medAB.RPS)
	fmt.Printf("   ratio agentbus/reference: best %.2f, median %.2f   (target >= 0.60: %s)\n", ratioBest, ratioMed, verdict(ratioBest >= 0.6))
	bestOff, medOff := best(offs), median(offs)
	offBest, offMed := bestOff.RPS/bestRef.RPS, medOff.RPS/medRef.RPS
	fmt.Printf("   ingest path alone (processing off, as on an HTTP-only replica): %.0f req/s (p99 %.2f ms), ratio best %.2f, median %.2f\n\n",
		bestOff.RPS, ms(bestOff.P99), offBest, offMed)
	rep.add("ingest.ingest_only.rps", bestOff.RPS, "req/s")
	rep.add("ingest.ingest_only.p99", ms(bestOff.P99), "ms")
	rep.add("ingest.ingest_only.ratio", offBest, "agentbus/reference")
	rep.add("ingest.ingest_only.ratio_median", offMed, "agentbus/reference")

	rep.add("ingest.reference.rps", bestRef.RPS, "req/s")
	rep.add("ingest.reference.p50", ms(bestRef.P50), "ms")
	rep.add("ingest.reference.p99", ms(bestRef.P99), "ms")
	rep.add("ingest.agentbus.rps", bestAB.RPS, "req/s")
	rep.add("ingest.agentbus.p50", ms(bestAB.P50), "ms")
	rep.add("ingest.agentbus.p99", ms(bestAB.P99), "ms")
	rep.add("ingest.reference.rps_median", medRef.RPS, "req/s")
	rep.add("ingest.agentbus.rps_median", medAB.RPS, "req/s")
	rep.add("ingest.ratio", ratioBest, "agentbus/reference")
	rep.add("ingest.ratio_median", ratioMed, "agentbus/reference")
	rep.row("ingest reference req/s (best)", fmt.Sprintf("%.0f", bestRef.RPS), "", "")
	rep.row("ingest reference p50 / p99 ms", fmt.Sprintf("%.2f / %.2f", ms(bestRef.P50), ms(bestRef.P99)), "", "")
	rep.row("ingest agentbus req/s (best)", fmt.Sprintf("%.0f", bestAB.RPS), "", "")
	rep.row("ingest agentbus p50 / p99 ms", fmt.Sprintf("%.2f / %.2f", ms(bestAB.P50), ms(bestAB.P99)), "", "")
	rep.row("ingest ratio agentbus/reference (best)", fmt.Sprintf("%.2f", ratioBest), ">= 0.60", verdict(ratioBest >= 0.6))
	rep.row("ingest ratio agentbus/reference (median)", fmt.Sprintf("%.2f", ratioMed), ">= 0.60", verdict(ratioMed >= 0.6))
	rep.row("ingest-only replica req/s, p99 ms", fmt.Sprintf("%.0f, %.2f", bestOff.RPS, ms(bestOff.P99)), "", "")
	rep.row("ingest-only ratio (best / median)", fmt.Sprintf("%.2f / %.2f", offBest, offMed), ">= 0.60", verdict(offBest >= 0.6))
	return nil
}

func syncStage(o options, src *bodies, rep *report) error {
	fmt.Println("4. Durability: agentbus ingest with nats.sync=always (fsync every write) vs default, run back to back")
	runtime.GC()
	waitQuiet()
	def, err := abIngest(o, src, "agentbus default", "")
	if err != nil {
		return err
	}
	runtime.GC()
	waitQuiet()
	r, err := abIngest(o, src, "agentbus sync=always", "", func(c *settings.Config) { c.NATS.Sync = "always" })
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	ingestHeader(tw)
	ingestLine(tw, def)
	ingestLine(tw, r)
	tw.Flush()
	ratio := r.RPS / def.RPS
	fmt.Printf("\n   sync=always keeps %.0f%% of the default run's ingest throughput\n\n", 100*ratio)
	rep.add("sync_default.agentbus.rps", def.RPS, "req/s")
	rep.add("sync_always.agentbus.rps", r.RPS, "req/s")
	rep.add("sync_always.agentbus.p99", ms(r.P99), "ms")
	rep.add("sync_always.ratio_to_default", ratio, "always/default")
	rep.row("ingest sync=always req/s (default, back to back)", fmt.Sprintf("%.0f (%.0f)", r.RPS, def.RPS), "", "")
	rep.row("ingest sync=always p50 / p99 ms", fmt.Sprintf("%.2f / %.2f", ms(r.P50), ms(r.P99)), "", "")
	rep.row("sync=always / default throughput", fmt.Sprintf("%.2f", ratio), "", "")
	return nil
}

func latencyStage(o options, rep *report) error {
	fmt.Printf("2. Command -> event visible: open loop at %.0f commands/s, %s warm-up + %s measured, %d rounds, each on a fresh agentbus\n", o.rate, o.rateWarm, o.rateDur, o.latRounds)
	if visibleMode == "watch" {
		fmt.Println("   visible = the command's event (agentbus.evt.>, matched by Agentbus-Correlation-Id; a CommandRejected counts, as rejected)")
		fmt.Println("   seen stored in AGENTBUS_EVENTS by an ordered JetStream consumer; the same signal for agentbus and the bare pipeline")
	} else {
		fmt.Println("   visible = the command's event (agentbus.evt.>, matched by Agentbus-Correlation-Id; a CommandRejected counts, as rejected)")
		fmt.Println("   seen published by a core NATS subscription; the same signal for agentbus and the bare pipeline")
	}
	fmt.Println("   all times from each command's scheduled send; load from a minimal HTTP/1.1 client, one keep-alive connection per sender")
	// A profile or trace slows the round it covers: that round comes after
	// the measured ones and does not count.
	profiling := o.profLatency != "" || o.memLatency != "" || o.traceLatency != ""
	var runs, bare []latencyResult
	// A process's first round is more often its worst (fresh pages for the
	// heap), so the bare pipeline goes first in odd rounds and second in
	// even ones.
	bareRoundOf := func(round int) error {
		fmt.Printf("   round %d of %d, bare reference pipeline\n", round, o.latRounds)
		r, err := bareRound(o)
		if err != nil {
			return err
		}
		printLatency(o, r)
		bare = append(bare, r)
		return nil
	}
	for round := 1; round <= o.latRounds || (profiling && round == o.latRounds+1); round++ {
		profiled := round > o.latRounds
		withBare := o.bare && !profiled
		if withBare && round%2 == 1 {
			if err := bareRoundOf(round); err != nil {
				return err
			}
		}
		if profiled {
			fmt.Printf("   round %d, profiled (not counted)\n", round)
		} else {
			fmt.Printf("   round %d of %d\n", round, o.latRounds)
		}
		r, err := latencyRound(o, profiled)
		if err != nil {
			return err
		}
		printLatency(o, r)
		if !profiled {
			runs = append(runs, r)
		}
		if withBare && round%2 == 0 {
			if err := bareRoundOf(round); err != nil {
				return err
			}
		}
	}
	// The round with the median p99 stands for the stage: one 5-second
	// window on a shared machine is too easily lucky or unlucky.
	r, p99s := medianP99(runs)
	lost := 0
	for _, x := range runs {
		lost += x.NeverVisible
	}
	best, worst := slices.MinFunc(runs, byVisP99), slices.MaxFunc(runs, byVisP99)
	ok := r.VisP99 <= latencyTarget && lost == 0
	fmt.Printf("   p99 of the %d rounds: %s ms; median round p50 %s / p99 %s / max %s ms\n", len(runs), strings.Join(p99s, ", "), fms(r.VisP50), fms(r.VisP99), fms(r.VisMax))
	fmt.Printf("   target median p99 <= %s and none lost: %s\n", latencyTarget, verdict(ok))
	var b latencyResult
	var bareP99s []string
	if len(bare) > 0 {
		b, bareP99s = medianP99(bare)
		fmt.Printf("   bare reference pipeline, p99 of the %d rounds: %s ms; median round p50 %s / p99 %s / max %s ms\n", len(bare), strings.Join(bareP99s, ", "), fms(b.VisP50), fms(b.VisP99), fms(b.VisMax))
	}
	fmt.Println()
	rep.addLatency("latency.visible.p50", r.VisP50, o.visTimeout)
	rep.addLatency("latency.visible.p99", r.VisP99, o.visTimeout)
	rep.addLatency("latency.visible.p99.best", best.VisP99, o.visTimeout)
	rep.addLatency("latency.visible.p99.worst", worst.VisP99, o.visTimeout)
	rep.addLatency("latency.visible.max", r.VisMax, o.visTimeout)
	rep.add("latency.visible.over_target", 100*r.VisOver, "%")
	rep.add("latency.alloc_per_command", allocPerCommand(r), "bytes")
	rep.addLatency("latency.accepted.p99", r.AckP99, o.visTimeout)
	rep.add("latency.achieved_rate", r.Achieved, "commands/s")
	rep.add("latency.never_visible", float64(lost), "commands")
	rep.add("latency.verified", float64(r.Verified), fmt.Sprintf("of %d", verifySample))
	rep.add("latency.others_cpu", r.CPU.Others(), "cores")
	rep.row(fmt.Sprintf("cmd->visible p50 / p99 / max ms @%.0f/s, %s rounds (median of %d)", o.rate, o.rateDur, len(runs)), fmt.Sprintf("%s / %s / %s", fms(r.VisP50), fms(r.VisP99), fms(r.VisMax)), fmt.Sprintf("p99 <= %g", ms(latencyTarget)), verdict(ok))
	rep.row("cmd->visible p99 of every round, ms", strings.Join(p99s, ", "), "", "")
	if len(bare) > 0 {
		rep.addLatency("latency.bare.p50", b.VisP50, o.visTimeout)
		rep.addLatency("latency.bare.p99", b.VisP99, o.visTimeout)
		rep.add("latency.bare.over_target", 100*b.VisOver, "%")
		rep.add("latency.bare.alloc_per_command", allocPerCommand(b), "bytes")
		rep.row(fmt.Sprintf("bare pipeline cmd->visible p50 / p99 / max ms (median of %d)", len(bare)), fmt.Sprintf("%s / %s / %s", fms(b.VisP50), fms(b.VisP99), fms(b.VisMax)), "", "")
		rep.row("bare pipeline cmd->visible p99 of every round, ms", strings.Join(bareP99s, ", "), "", "")
		rep.row("heap allocated per command, KB: agentbus / bare (median rounds, whole process)", fmt.Sprintf("%.1f / %.1f", allocPerCommand(r)/1024, allocPerCommand(b)/1024), "", "")
	}
	rep.row("achieved send rate /s", fmt.Sprintf("%.0f", r.Achieved), fmt.Sprintf("%.0f", o.rate), verdict(r.Achieved >= 0.98*o.rate))
	rep.row("not visible within "+o.visTimeout.String(), fmt.Sprint(lost), "0", verdict(lost == 0))
	rep.row("lookup verified (GET /events), of visible", fmt.Sprintf("%d/%d", r.Verified, r.VerifyVisible), "all", verdict(r.Verified == r.VerifyVisible && r.VerifyVisible > 0))
	if o.sustained > 0 {
		return sustainedRound(o, rep)
	}
	return nil
}

// sustainedRound runs one longer round at the stage's rate on a fresh
// agentbus, judged by the same target: the judged rounds are bursts of a
// fresh server, and at a sustained rate the live heap the collector marks
// keeps growing. It does not change the stage's verdict, which is the
// bursts'; the summary shows both.
func sustainedRound(o options, rep *report) error {
	so := o
	so.rateDur = o.sustained
	// -latency-csv stays the judged (or profiled) round's; a CSV of a long
	// round is -rate-duration's.
	defer func(p string) { dumpPath = p }(dumpPath)
	dumpPath = ""
	if o.bare {
		fmt.Printf("   sustained, bare reference pipeline: one round of %s measured at %.0f commands/s\n", o.sustained, o.rate)
		b, err := bareRound(so)
		if err != nil {
			return err
		}
		printLatency(so, b)
		fmt.Println()
		rep.addLatency("latency.sustained.bare.p99", b.VisP99, o.visTimeout)
		rep.add("latency.sustained.bare.over_target", 100*b.VisOver, "%")
		rep.add("latency.sustained.bare.alloc_per_command", allocPerCommand(b), "bytes")
		rep.row(fmt.Sprintf("bare pipeline cmd->visible p50 / p99 / max ms, sustained %s", o.sustained), fmt.Sprintf("%s / %s / %s", fms(b.VisP50), fms(b.VisP99), fms(b.VisMax)), "", "")
	}
	fmt.Printf("   sustained: one round of %s measured at %.0f commands/s\n", o.sustained, o.rate)
	r, err := latencyRound(so, false)
	if err != nil {
		return err
	}
	printLatency(so, r)
	ok := r.VisP99 <= latencyTarget && r.NeverVisible == 0
	fmt.Printf("   sustained target p99 <= %s and none lost: %s\n\n", latencyTarget, verdict(ok))
	rep.addLatency("latency.sustained.p50", r.VisP50, o.visTimeout)
	rep.addLatency("latency.sustained.p99", r.VisP99, o.visTimeout)
	rep.add("latency.sustained.over_target", 100*r.VisOver, "%")
	rep.add("latency.sustained.alloc_per_command", allocPerCommand(r), "bytes")
	rep.add("latency.sustained.never_visible", float64(r.NeverVisible), "commands")
	rep.row(fmt.Sprintf("cmd->visible p50 / p99 / max ms, sustained %s", o.sustained), fmt.Sprintf("%s / %s / %s", fms(r.VisP50), fms(r.VisP99), fms(r.VisMax)), fmt.Sprintf("p99 <= %g", ms(latencyTarget)), verdict(ok))
	return nil
}

// allocPerCommand is the heap the whole process (load generator, observer
// and the server under test with its nats-server) allocated per command in
// a round, from its first send until its commands were visible.
func allocPerCommand(r latencyResult) float64 { return r.AllocPerCmd }

// latencyTarget is the command -> event visible p99 the latency stage
// judges by.
const latencyTarget = 25 * time.Millisecond

// verifySample is how many commands of a latency round are looked up with
// GET /events?correlationId= as soon as they are visible.
const verifySample = 20

// latencyRound runs the latency stage once on a fresh agentbus; profiles
// (-cpuprofile-latency, -memprofile-latency) are taken of the round asked.
func latencyRound(o options, profile bool) (latencyResult, error) {
	runtime.GC()
	waitQuiet()
	ab, err := startAgentbus(o.verbose)
	if err != nil {
		return latencyResult{}, err
	}
	defer ab.Stop()
	var during func() func()
	if profile { // only asked when a profile or trace is
		during = func() func() {
			var stop, stopTrace func()
			if o.profLatency != "" {
				stop = startProfile(o.profLatency, 0)
			}
			if o.traceLatency != "" {
				stopTrace = startTrace(o.traceLatency)
			}
			if o.memLatency != "" {
				writeHeapProfile(o.memLatency + ".base")
			}
			return func() {
				if stop != nil {
					stop()
				}
				if stopTrace != nil {
					stopTrace()
				}
				if o.memLatency != "" {
					writeHeapProfile(o.memLatency)
				}
			}
		}
	}
	return runLatency(ab, o.rate, o.rateWarm, o.rateDur, o.visTimeout, o.rateWorkers, verifySample, during)
}

// bareRound runs the latency stage once on a fresh bare reference pipeline.
func bareRound(o options) (latencyResult, error) {
	return runBare(o.rate, o.rateWarm, o.rateDur, o.visTimeout, o.rateWorkers)
}

// runBare runs runLatency on a fresh bare reference pipeline (refpipe.go),
// which has no GET /events to verify with, once other processes are quiet.
func runBare(rate float64, warm, dur, visTimeout time.Duration, workers int) (latencyResult, error) {
	runtime.GC()
	waitQuiet()
	rp, err := startReferencePipeline()
	if err != nil {
		return latencyResult{}, err
	}
	defer rp.Stop()
	return runLatency(rp, rate, warm, dur, visTimeout, workers, 0, nil)
}

func byVisP99(a, b latencyResult) int { return cmp.Compare(a.VisP99, b.VisP99) }

// medianP99 returns the round with the median p99, and every round's p99.
func medianP99(runs []latencyResult) (latencyResult, []string) {
	byP99 := slices.Clone(runs)
	slices.SortFunc(byP99, byVisP99)
	var p99s []string
	for _, x := range runs {
		p99s = append(p99s, fms(x.VisP99))
	}
	return byP99[(len(byP99)-1)/2], p99s
}

// printLatency prints one round of the latency stage.
func printLatency(o options, r latencyResult) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tp50 ms\tp99 ms\tmax ms\t")
	fmt.Fprintf(tw, "event visible\t%s\t%s\t%s\t\n", fms(r.VisP50), fms(r.VisP99), fms(r.VisMax))
	fmt.Fprintf(tw, "POST answered 202\t%s\t%s\t\t\n", fms(r.AckP50), fms(r.AckP99))
	fmt.Fprintf(tw, "sender behind schedule\t\t%s\t%s\t\n", fms(r.LagP99), fms(r.LagMax))
	tw.Flush()
	fmt.Printf("   visible after more than %s (or never): %.2f %% of the commands\n", latencyTarget, 100*r.VisOver)
	fmt.Printf("   CPU during the measured sends: bench process %.2f cores, other processes %.2f cores; heap allocated %.1f KB per command, %d collections\n",
		r.CPU.Own, r.CPU.Others(), float64(r.CPU.Alloc)/1024/float64(max(r.Measured, 1)), r.CPU.GCs)
	fmt.Printf("   heap allocated per command from the first send until all were visible (or the timeout): %.1f KB\n", r.AllocPerCmd/1024)
	fmt.Printf("   commands measured %d, achieved send rate %.0f/s, HTTP errors %d, rejected %d, not visible within %s: %d\n",
		r.Measured, r.Achieved, r.HTTPErrors, r.Rejected, o.visTimeout, r.NeverVisible)
	if r.FirstErr != "" {
		fmt.Printf("   first HTTP error: %s\n", r.FirstErr)
	}
	if r.VerifyTotal == 0 {
		if r.Logs != "none" {
			fmt.Printf("   errors: %s\n", r.Logs)
		}
		return
	}
	fmt.Printf("   GET /events?correlationId= on %d random commands as soon as their event was seen: %d returned the event",
		r.VerifyTotal, r.Verified)
	fmt.Printf(" (%d on the first GET", r.VerifiedFirst)
	if r.Verified > r.VerifiedFirst {
		fmt.Printf(", the others within %.2f ms", ms(r.VerifyLate))
	}
	if n := r.VerifyTotal - r.VerifyVisible; n > 0 {
		fmt.Printf("; %d never became visible before the run ended, so were not looked up", n)
	}
	fmt.Println(")")
	if r.VerifyErr != "" {
		fmt.Printf("   first verification failure: %s\n", r.VerifyErr)
	}
	if r.Logs != "none" {
		fmt.Printf("   agentbus warnings: %s\n", r.Logs)
	}
}

func capacityStage(o options, rep *report) error {
	fmt.Printf("2a. Pipeline capacity: %d commands over %d connections as fast as accepted, timed until every one is visible;\n", o.capN, o.conns)
	fmt.Printf("    rounds alternate the bare reference pipeline (refpipe.go), agentbus with the in-memory handoff on (the default) and off\n")
	fmt.Printf("    (processor.handoff: false), each on a fresh server\n")
	var with, without, bare []capacityResult
	for round := range 6 {
		if round%3 == 0 {
			runtime.GC()
			waitQuiet()
			rp, err := startReferencePipeline()
			if err != nil {
				return err
			}
			r, err := runCapacity(rp, o.capN, o.conns)
			rp.Stop()
			if err != nil {
				return err
			}
			fmt.Printf("   bare pipeline: all accepted in %s, all visible in %s: %.0f commands/s end to end; process CPU %.0f µs per command\n",
				r.Ingest.Round(time.Millisecond), r.Wall.Round(time.Millisecond), r.Rate, float64(r.CPUPerCmd)/1e3)
			fmt.Printf("      (other processes used %.2f cores meanwhile; errors %d; not visible after 60s: %d)\n", r.CPU.Others(), r.Errors, r.NotVisible)
			bare = append(bare, r)
			continue
		}
		handoff := round%3 == 1
		runtime.GC()
		waitQuiet()
		profile := ""
		if round == 1 {
			profile = o.profCapacity
		}
		r, err := abCapacity(o, profile, func(c *settings.Config) { c.Processor.Handoff = handoff })
		if err != nil {
			return err
		}
		fmt.Printf("   handoff %-3s: all accepted in %s, all visible in %s: %.0f commands/s end to end; process CPU %.0f µs per command\n",
			onOff(handoff), r.Ingest.Round(time.Millisecond), r.Wall.Round(time.Millisecond), r.Rate, float64(r.CPUPerCmd)/1e3)
		fmt.Printf("      (other processes used %.2f cores meanwhile; errors %d; not visible after 60s: %d)\n",
			r.CPU.Others(), r.Errors, r.NotVisible)
		if r.FirstErr != "" {
			fmt.Printf("      first error: %s\n", r.FirstErr)
		}
		if handoff {
			with = append(with, r)
		} else {
			without = append(without, r)
		}
	}
	// Each side's figure is its best round: the highest rate and, apart,
	// the least CPU per command (a slow minute of the shared box makes a
	// round worse, never better).
	best := func(rs []capacityResult) capacityResult {
		b := rs[0]
		for _, r := range rs[1:] {
			b.Rate = max(b.Rate, r.Rate)
			b.CPUPerCmd = min(b.CPUPerCmd, r.CPUPerCmd)
		}
		return b
	}
	on, off, b := best(with), best(without), best(bare)
	fmt.Printf("   best of each: handoff on %.0f/s at %.0f µs, off %.0f/s at %.0f µs: the handoff saves %.0f %% of the CPU per command\n",
		on.Rate, float64(on.CPUPerCmd)/1e3, off.Rate, float64(off.CPUPerCmd)/1e3, 100*(1-float64(on.CPUPerCmd)/float64(off.CPUPerCmd)))
	rep.add("capacity.rate", on.Rate, "commands/s")
	rep.add("capacity.cpu_per_command", float64(on.CPUPerCmd)/1e3, "µs")
	fmt.Printf("   bare pipeline, best: %.0f/s at %.0f µs per command; agentbus (handoff on) uses %.2fx its CPU per command\n\n",
		b.Rate, float64(b.CPUPerCmd)/1e3, float64(on.CPUPerCmd)/float64(b.CPUPerCmd))
	rep.add("capacity.bare.rate", b.Rate, "commands/s")
	rep.add("capacity.bare.cpu_per_command", float64(b.CPUPerCmd)/1e3, "µs")
	rep.add("capacity.cpu_ratio_to_bare", float64(on.CPUPerCmd)/float64(b.CPUPerCmd), "agentbus/bare")
	rep.add("capacity.rate_no_handoff", off.Rate, "commands/s")
	rep.add("capacity.cpu_per_command_no_handoff", float64(off.CPUPerCmd)/1e3, "µs")
	rep.row("pipeline capacity, commands/s end to end", fmt.Sprintf("%.0f", on.Rate), fmt.Sprintf(">= %.0f", o.rate), verdict(on.Rate >= o.rate))
	rep.row("process CPU per command (µs)", fmt.Sprintf("%.0f", float64(on.CPUPerCmd)/1e3), "", "")
	rep.row("  without the handoff: commands/s, CPU µs per command", fmt.Sprintf("%.0f, %.0f", off.Rate, float64(off.CPUPerCmd)/1e3), "", "")
	rep.row("  bare pipeline: commands/s, CPU µs per command", fmt.Sprintf("%.0f, %.0f", b.Rate, float64(b.CPUPerCmd)/1e3), "", "")
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func memoryStage(o options, rep *report) error {
	const dupWindow = 45 * time.Second
	fmt.Printf("5. Memory a stored command keeps: %d PlaceOrder commands (each a new order), live heap of the process\n", o.memN)
	fmt.Printf("   (embedded nats-server included) after the block caches expired; duplicate window %s for the run\n", dupWindow)
	runtime.GC()
	waitQuiet()
	r, err := runMemory(o.verbose, o.memN, dupWindow)
	if err != nil {
		return err
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Printf("   live heap MiB: before %.1f, all stored %.1f, ids out of the window %.1f\n",
		mib(r.Base), mib(r.Full), mib(r.NoDups))
	fmt.Printf("   per command: %.0f B while its ids are in the duplicate windows (command and event), %.0f B for good per new\n", r.PerID, r.PerAggregate)
	fmt.Printf("   aggregate (what is left once the windows passed; the receipts are in the history on disk, not in the NATS server)\n")
	if r.Logs != "none" {
		fmt.Printf("   agentbus warnings: %s\n", r.Logs)
	}
	fmt.Printf("   stage time %s\n\n", r.TotalTime.Round(100*time.Millisecond))
	rep.add("memory.per_command.duplicate_window", r.PerID, "bytes")
	rep.add("memory.per_aggregate", r.PerAggregate, "bytes")
	rep.row("memory per command: dup window / aggregate, B", fmt.Sprintf("%.0f / %.0f", r.PerID, r.PerAggregate), "", "")
	return nil
}

func millionStage(o options, rep *report) error {
	fmt.Printf("3. Correlation lookup: GET /events?correlationId= (%d sequential lookups per row), then %d raw events\n", o.lookups, o.millionN)
	fmt.Printf("   published into AGENTBUS_EVENTS (PublishAsync, window %d) and the lookups repeated\n", o.millionWindow)
	runtime.GC()
	waitQuiet()
	r, err := runMillion(o.verbose, o.millionN, o.millionWindow, o.lookups, o.millionLimit)
	if err != nil {
		return err
	}
	if r.Skipped != "" {
		fmt.Printf("   !! %s\n", r.Skipped)
	}
	fmt.Printf("   seeded %d events in %s (%.0f events/s, %d publish errors); agentbus's history caught up %s later\n",
		r.Seeded, r.Fill.Round(time.Millisecond), r.FillRate, r.SeedErrors, r.CatchUp.Round(time.Millisecond))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tevents stored\tMiB\tp50 ms\tp99 ms\tmax ms\terrors\t")
	for _, l := range []struct {
		name string
		s    lookupStats
	}{{"empty (probe commands only)", r.Empty}, {"1M seeded, new commands", r.Full}, {"1M seeded, first commands", r.FullOld}} {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.2f\t%.2f\t%.2f\t%d\t\n", l.name, l.s.StoreMsgs, l.s.StoreMegabytes, ms(l.s.P50), ms(l.s.P99), ms(l.s.Max), l.s.Errors)
		if l.s.FirstErr != "" {
			fmt.Fprintf(tw, "  first error: %s\t\t\t\t\t\t\t\n", l.s.FirstErr)
		}
	}
	tw.Flush()
	if r.Logs != "none" {
		fmt.Printf("   agentbus warnings: %s\n", r.Logs)
	}
	fmt.Printf("   stage time %s\n\n", r.TotalTime.Round(100*time.Millisecond))
	rep.add("million.fill_seconds", r.Fill.Seconds(), "s")
	rep.add("million.fill_rate", r.FillRate, "events/s")
	rep.add("million.catchup_seconds", r.CatchUp.Seconds(), "s")
	rep.add("lookup.empty.p50", ms(r.Empty.P50), "ms")
	rep.add("lookup.empty.p99", ms(r.Empty.P99), "ms")
	rep.add("lookup.million.p50", ms(r.Full.P50), "ms")
	rep.add("lookup.million.p99", ms(r.Full.P99), "ms")
	rep.add("lookup.million_old.p99", ms(r.FullOld.P99), "ms")
	rep.add("million.stage_seconds", r.TotalTime.Seconds(), "s")
	rep.row("1M seed fill (s)", fmt.Sprintf("%.1f (%.0f/s)", r.Fill.Seconds(), r.FillRate), "", "")
	rep.row("lookup p50 / p99 ms, empty store", fmt.Sprintf("%.2f / %.2f", ms(r.Empty.P50), ms(r.Empty.P99)), "", "")
	rep.row("lookup p50 / p99 ms, 1M events", fmt.Sprintf("%.2f / %.2f", ms(r.Full.P50), ms(r.Full.P99)), "~ empty", verdict(r.Full.P99 <= 2*r.Empty.P99+time.Millisecond && r.Full.Errors == 0))
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

func best(rs []loadResult) loadResult {
	b := rs[0]
	for _, r := range rs[1:] {
		if r.RPS > b.RPS {
			b = r
		}
	}
	return b
}

// median returns the run with the median throughput; for an even count, the
// lower middle run with its throughput replaced by the mean of the two
// middle runs (its latencies are the lower run's).
func median(rs []loadResult) loadResult {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b loadResult) int {
		switch {
		case a.RPS < b.RPS:
			return -1
		case a.RPS > b.RPS:
			return 1
		}
		return 0
	})
	if len(s)%2 == 0 {
		m := s[len(s)/2-1]
		m.RPS = (s[len(s)/2-1].RPS + s[len(s)/2].RPS) / 2
		m.Label = "median of " + fmt.Sprint(len(s))
		return m
	}
	return s[len(s)/2]
}
