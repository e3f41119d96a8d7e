package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The restart stage (`-only restart`; not part of `make bench`) runs
// agentbus as `make run` does — the binary, `agentbus serve` in a process
// of its own with the default settings and memory mode, embedded NATS —
// and times its start on an empty data directory and again on the same
// directory once it holds N events, with agentbus's resident memory once
// ready; then it looks up commands spread over the whole log with GET
// /events?correlationId=.
//
// The log is seeded as agentbus writes it: one PlaceOrder command goes
// through the pipeline, and its stored OrderPlaced event (subject, headers,
// CloudEvent) is the template of the others, published straight into the
// event stream with the command's id, correlation id and event id replaced
// (command i of tag restartTag: each a new order, each its own
// correlation id, as commandBody makes them). agentbus's history (the
// correlation index on its disk, which GET /events?correlationId= reads)
// and its durable consumers of the event log read them; the seed keeps
// them within restartMaxLag events of its publishing, and the restart
// waits until they have caught up and the stream's duplicate window has
// passed since the last write, as in a log whose events are older than
// that window. Only events are seeded: the commands behind them (but the
// first) are not in the command log, and their events name the first
// command's sequence.

// restartTag starts the id of every command of the restart stage.
const restartTag = "restart"

// restartMaxLag bounds how far the seed runs ahead of agentbus's history
// and of its slowest durable consumer of the event log.
const restartMaxLag = 200_000

// restartOptions are the restart stage's settings.
type restartOptions struct {
	n         int           // events in the log at the second start
	limit     time.Duration // seeding stops after this long (reported)
	bin       string        // the agentbus binary; "" builds ./cmd/agentbus
	window    int           // unacknowledged publishes at most
	lookups   int           // commands looked up after the second start
	pprofDir  string        // a third start, with ops.pprof on, profiled here
	profileS  int           // seconds of CPU profile of that start
	readyWait time.Duration // a start not ready this long fails the stage
	keep      bool          // keep the stage's directory (its data dir) at the end
}

// Targets of the restart stage.
const (
	restartReadyTarget  = 5 * time.Second
	restartRSSTarget    = 400 // MiB
	restartLookupTarget = 2 * time.Millisecond
)

func restartStage(o restartOptions, rep *report) error {
	if o.n < 1 || o.lookups < 1 || o.window < 1 {
		return errors.New("restart: -restart-n, -lookups and -million-window must be at least 1")
	}
	t0 := time.Now()
	dir, err := os.MkdirTemp("", "agentbus-restart-")
	if err != nil {
		return err
	}
	if o.keep {
		defer fmt.Printf("   the stage's directory, kept (-restart-keep): %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bin := o.bin
	how := "built from ./cmd/agentbus"
	if bin == "" {
		bin = filepath.Join(dir, "agentbus")
		build := exec.Command("go", "build", "-o", bin, "./cmd/agentbus")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("restart: go build ./cmd/agentbus: %w", err)
		}
	} else {
		if bin, err = filepath.Abs(bin); err != nil {
			return err
		}
		how = "-restart-agentbus"
	}
	data := filepath.Join(dir, "data")
	fmt.Printf("10. Restart: agentbus as make run starts it (%s serve, %s; default settings and memory mode, embedded NATS),\n", bin, how)
	fmt.Printf("    started on an empty data dir, then on the same dir with %d events in the log; ready = GET /readyz answers 200\n", o.n)
	fmt.Printf("    (polled every 10 ms from the process's start); RSS = agentbus's VmRSS (/proc/PID/status) at that moment\n")
	fmt.Printf("    %s  loadavg %s\n", time.Now().UTC().Format(time.RFC3339), loadAvg())
	waitQuiet()

	// 1. The empty log.
	ab, err := startServe(bin, data, dir, "")
	if err != nil {
		return err
	}
	defer ab.stop()
	empty, err := ab.waitReady(o.readyWait)
	if err != nil {
		return err
	}
	fmt.Printf("   empty log: ready after %.2f s, RSS %.0f MiB\n", empty.ready.Seconds(), empty.rssMiB)

	// 2. The seed.
	seed, err := seedRestart(ab, data, o)
	if err != nil {
		return err
	}
	if seed.stopped != "" {
		fmt.Printf("   !! %s\n", seed.stopped)
	}
	fmt.Printf("   seeded %d events in %s (%.0f events/s; publish errors %d, duplicates %d); agentbus's history and consumers caught up %s after the last\n",
		seed.n, seed.fill.Round(time.Millisecond), float64(seed.n)/seed.fill.Seconds(), seed.errs, seed.dups, seed.catchUp.Round(time.Millisecond))
	fmt.Printf("   event stream %d messages, %.0f MiB; waited %s for the duplicate window (%s) to pass\n",
		seed.events, seed.eventsMiB, seed.dupWait.Round(time.Second), seed.window)
	ab.stop()
	// The replica's disk (its read models, its copies of the events)
	// beside the event stream's.
	indexBytes, err := dirSize(filepath.Join(data, "index"))
	if err != nil {
		return err
	}
	// The copies' tables: each is an open file and a first read's opening.
	copiesBytes, copiesTables, err := dirFiles(filepath.Join(data, "events"), ".sst")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	fmt.Printf("   the replica's disk: read models (%s/index) %.0f MiB, copies of the events (%s/events) %.0f MiB in %d tables\n",
		data, float64(indexBytes)/(1<<20), data, float64(copiesBytes)/(1<<20), copiesTables)
	if w := ab.warns.count(); w > 0 {
		fmt.Printf("   agentbus, first run: %d warnings and errors%s\n", w, ab.warns.firstText())
	}

	// 3. The same data dir, N events.
	runtime.GC()
	waitQuiet()
	ab2, err := startServe(bin, data, dir, "")
	if err != nil {
		return err
	}
	defer ab2.stop()
	full, err := ab2.waitReady(o.readyWait)
	if err != nil {
		return err
	}
	fmt.Printf("   %d events: ready after %.2f s, RSS %.0f MiB\n", seed.n, full.ready.Seconds(), full.rssMiB)
	lk := restartLookups(ab2, seed.n, o.lookups, 0)
	rested := ab2.rssMiB()
	peak := mib(procStatusOf(ab2.pid, "VmHWM"))
	fmt.Printf("   first lookup (the oldest command) answered %.2f s after the start\n", lk.firstAt.Sub(ab2.started).Seconds())
	fmt.Printf("   GET /events?correlationId= for %d commands spread over the log (the oldest and the newest included), in random order,\n", lk.looked)
	fmt.Printf("   from right after ready: %d found their event; p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", lk.found, ms(lk.p50), ms(lk.p99), ms(lk.max))
	if lk.firstMiss != "" {
		fmt.Printf("   first miss: %.300s\n", lk.firstMiss)
	}
	fmt.Printf("   agentbus RSS after the lookups %.0f MiB, peak since its start %.0f MiB; agentbus CPU since its start %.2f s\n",
		rested, peak, procCPU(ab2.pid).Seconds())
	// Lookups once the start's reading of the log is done, of other
	// commands: no receipt of theirs was read by the first ones.
	settled := ab2.settle(restartSettleLimit)
	settledRSS := ab2.rssMiB()
	lk2 := restartLookups(ab2, seed.n, o.lookups, 1)
	after := settled.Sub(ab2.started)
	gaveUp := ""
	if after >= restartSettleLimit {
		gaveUp = " (the wait's limit: it had not)"
	}
	fmt.Printf("   agentbus settled (under %.2f cores for %s) %.1f s after the start%s; RSS %.0f MiB; lookups of other commands:\n",
		restartIdle, restartIdleFor, after.Seconds(), gaveUp, settledRSS)
	fmt.Printf("   %d found their event; p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", lk2.found, ms(lk2.p50), ms(lk2.p99), ms(lk2.max))
	if lk2.firstMiss != "" {
		fmt.Printf("   first miss: %.300s\n", lk2.firstMiss)
	}
	rs, err := restartResubmit(ab2, data, seed.n, o.lookups)
	if err != nil {
		return err
	}
	fmt.Printf("   POST /commands again for the same %d commands: %d answered 202 with their id; the command log gained %d messages; p50 %.2f ms, p99 %.2f ms\n",
		rs.sent, rs.sameID, rs.queued, ms(rs.p50), ms(rs.p99))
	if rs.firstMiss != "" {
		fmt.Printf("   first miss: %.300s\n", rs.firstMiss)
	}
	ab2.stop()
	if w := ab2.warns.count(); w > 0 {
		fmt.Printf("   agentbus, second run: %d warnings and errors%s\n", w, ab2.warns.firstText())
	}

	// 4. Where the start's time and memory go, when asked.
	if o.pprofDir != "" {
		if err := profileStart(bin, data, dir, o); err != nil {
			fmt.Printf("   profile: %v\n", err)
		}
	}
	fmt.Printf("   stage time %s\n\n", time.Since(t0).Round(time.Second))

	// The figures keep their names whatever N is; their notes say N when
	// it is not 10M.
	tag, nText, note := "10m", "", ""
	if seed.n != 10_000_000 {
		nText = fmt.Sprintf(" (N = %d, not 10M)", seed.n)
		note = fmt.Sprintf("%d events, not 10M", seed.n)
	}
	addN := func(name string, v float64, unit string) {
		rep.figures = append(rep.figures, figure{Figure: name, Value: v, Unit: unit, Note: note})
	}
	found := float64(lk.found) / float64(max(lk.looked, 1))
	rep.add("restart.seeded", float64(seed.n), "events")
	rep.add("restart.seed_seconds", seed.fill.Seconds(), "s")
	rep.add("restart.ready_seconds.empty", empty.ready.Seconds(), "s")
	rep.add("restart.rss_mib.empty", empty.rssMiB, "MiB")
	addN("restart.events_mib."+tag, seed.eventsMiB, "MiB")
	addN("restart.index_mib."+tag, float64(indexBytes)/(1<<20), "MiB")
	addN("restart.copies_mib."+tag, float64(copiesBytes)/(1<<20), "MiB")
	addN("restart.copies_tables."+tag, float64(copiesTables), "tables")
	addN("restart.ready_seconds."+tag, full.ready.Seconds(), "s")
	addN("restart.rss_mib."+tag, full.rssMiB, "MiB")
	addN("restart.rss_mib_after_lookups."+tag, rested, "MiB")
	addN("restart.rss_mib_peak."+tag, peak, "MiB")
	addN("lookup."+tag+".p50", ms(lk.p50), "ms")
	addN("lookup."+tag+".p99", ms(lk.p99), "ms")
	addN("lookup."+tag+".found", found, "fraction")
	addN("restart.settled_seconds."+tag, after.Seconds(), "s")
	addN("restart.rss_mib_settled."+tag, settledRSS, "MiB")
	addN("lookup."+tag+"_settled.p50", ms(lk2.p50), "ms")
	addN("lookup."+tag+"_settled.p99", ms(lk2.p99), "ms")
	addN("lookup."+tag+"_settled.found", float64(lk2.found)/float64(max(lk2.looked, 1)), "fraction")
	addN("resubmit."+tag+".same_id", float64(rs.sameID)/float64(max(rs.sent, 1)), "fraction")
	addN("resubmit."+tag+".queued", float64(rs.queued), "commands")
	addN("resubmit."+tag+".p99", ms(rs.p99), "ms")
	rep.row("restart: start to ready, empty log (s)", fmt.Sprintf("%.2f", empty.ready.Seconds()), fmt.Sprintf("<= %g", restartReadyTarget.Seconds()), verdict(empty.ready <= restartReadyTarget))
	rep.row(fmt.Sprintf("restart: start to ready, %d events (s)%s", seed.n, nText), fmt.Sprintf("%.2f", full.ready.Seconds()), fmt.Sprintf("<= %g", restartReadyTarget.Seconds()), verdict(full.ready <= restartReadyTarget))
	rep.row("restart: RSS after ready, empty log (MiB)", fmt.Sprintf("%.0f", empty.rssMiB), fmt.Sprintf("<= %d", restartRSSTarget), verdict(empty.rssMiB <= restartRSSTarget))
	rep.row(fmt.Sprintf("restart: RSS after ready, %d events (MiB)%s", seed.n, nText), fmt.Sprintf("%.0f", full.rssMiB), fmt.Sprintf("<= %d", restartRSSTarget), verdict(full.rssMiB <= restartRSSTarget))
	rep.row(fmt.Sprintf("lookup p50 / p99 ms, %d events, commands across the log%s", seed.n, nText), fmt.Sprintf("%.2f / %.2f", ms(lk.p50), ms(lk.p99)), fmt.Sprintf("p99 <= %g", ms(restartLookupTarget)), verdict(lk.p99 <= restartLookupTarget && lk.found == lk.looked))
	rep.row("lookup: commands found", fmt.Sprintf("%d/%d", lk.found, lk.looked), "all", verdict(lk.found == lk.looked))
	rep.row(fmt.Sprintf("lookup p50 / p99 ms, %d events, once agentbus settled%s", seed.n, nText), fmt.Sprintf("%.2f / %.2f", ms(lk2.p50), ms(lk2.p99)), fmt.Sprintf("p99 <= %g", ms(restartLookupTarget)), verdict(lk2.p99 <= restartLookupTarget && lk2.found == lk2.looked))
	rep.row(fmt.Sprintf("resubmitted across the log: same id, commands queued%s", nText), fmt.Sprintf("%d/%d, %d", rs.sameID, rs.sent, rs.queued), "all, 0", verdict(rs.sameID == rs.sent && rs.queued == 0))
	return nil
}

// serveProc is one `agentbus serve` process.
type serveProc struct {
	cmd     *exec.Cmd
	pid     string
	api     string
	ops     string
	nats    string // the embedded server's client port
	started time.Time
	warns   *warnLog
	logDone chan struct{}
	logf    *os.File
	once    sync.Once
	exited  chan struct{}
}

// startServe starts `bin serve` on data with free loopback ports and the
// default settings (config, when set, is a config file), the caller's
// AGENTBUS_* variables left out; its log goes to a file in dir.
func startServe(bin, data, dir, config string) (*serveProc, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--listen", ports[0], "--ops-listen", ports[1], "--nats-listen", ports[2], "--data", data}
	if config != "" {
		args = append(args, "--config", config)
	}
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGENTBUS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	logf, err := os.OpenFile(filepath.Join(dir, "agentbus.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd.Stdout = logf
	p := &serveProc{cmd: cmd, api: "http://" + ports[0], ops: "http://" + ports[1], nats: ports[2], warns: &warnLog{},
		logDone: make(chan struct{}), logf: logf, exited: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start agentbus: %w", err)
	}
	p.pid = strconv.Itoa(cmd.Process.Pid)
	go func() { defer close(p.logDone); p.warns.copy(stderr, logf) }()
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// readiness is a start's figures.
type readiness struct {
	ready  time.Duration // from the process's start to GET /readyz 200
	rssMiB float64       // agentbus's VmRSS then
}

// waitReady polls GET /readyz every 10 ms until it answers 200, and reads
// the process's RSS at once.
func (p *serveProc) waitReady(timeout time.Duration) (readiness, error) {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	defer c.CloseIdleConnections()
	for time.Since(p.started) < timeout {
		select {
		case <-p.exited:
			return readiness{}, fmt.Errorf("agentbus ended before it was ready; it said: %s", p.warns.last())
		default:
		}
		resp, err := c.Get(p.ops + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return readiness{ready: time.Since(p.started), rssMiB: p.rssMiB()}, nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return readiness{}, fmt.Errorf("agentbus not ready within %s; it said: %s", timeout, p.warns.last())
}

// When agentbus counts as settled after a start: under restartIdle cores
// for restartIdleFor, waited for at most restartSettleLimit.
const (
	restartIdle        = 0.05
	restartIdleFor     = 2 * time.Second
	restartSettleLimit = 5 * time.Minute
)

// settle waits until the process has used under restartIdle cores for
// restartIdleFor, or until limit after its start, and says when.
func (p *serveProc) settle(limit time.Duration) time.Time {
	prev, at := procCPU(p.pid), time.Now()
	for time.Since(p.started) < limit {
		time.Sleep(restartIdleFor)
		cpu, now := procCPU(p.pid), time.Now()
		if (cpu-prev).Seconds()/now.Sub(at).Seconds() < restartIdle {
			return now
		}
		prev, at = cpu, now
	}
	return time.Now()
}

// connect connects to the process's embedded server as the admin
// commands reach it: with the credential serve writes in its data dir
// when it requires one.
func (p *serveProc) connect(data, name string) (*nats.Conn, error) {
	natsURL, opts := "nats://"+p.nats, []nats.Option{nats.Name(name)}
	admin, ok, err := natsjs.AdminAccess(data)
	if err != nil {
		return nil, err
	}
	if ok {
		natsURL, opts = admin.URL, append(opts, nats.UserInfo(admin.User, admin.Password))
	}
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to agentbus's NATS: %w", err)
	}
	return nc, nil
}

func (p *serveProc) rssMiB() float64 { return mib(procStatusOf(p.pid, "VmRSS")) }

// stop ends the process (SIGTERM, then SIGKILL after 60 s) and waits for
// it and its log; safe to call again.
func (p *serveProc) stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(60 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		<-p.logDone
		p.logf.Close()
	})
}

// seedResult is what the seed did.
type seedResult struct {
	n             int // events in the log: the first command's and the seeded ones
	fill, catchUp time.Duration
	dupWait       time.Duration
	window        time.Duration // the event stream's duplicate window
	errs, dups    int64
	stopped       string
	events        uint64
	eventsMiB     float64
}

// seedRestart submits command 0 through agentbus's pipeline, takes its
// stored event as the template, and publishes events 1..n-1 from it into
// the event stream as agentbus's administrator (the credential serve
// writes in its data dir).
func seedRestart(ab *serveProc, data string, o restartOptions) (seedResult, error) {
	var res seedResult
	ctx := context.Background()
	client := newClient(4)
	defer client.CloseIdleConnections()
	if status, body, err := post(client, ab.api+"/commands", commandBody(restartTag, 0)); err != nil || status != http.StatusAccepted {
		return res, fmt.Errorf("restart: the first command: %d %v %s", status, err, trunc(body, 200))
	}
	corr0 := commandCorrelation(restartTag, 0)
	deadline := time.Now().Add(30 * time.Second)
	for verifyLookup(client, ab.api, corr0, restartTag+"-0") != nil {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("restart: the first command not found by GET /events?correlationId= within 30s: %v", verifyLookup(client, ab.api, corr0, restartTag+"-0"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	nc, err := ab.connect(data, "agentbus-bench-seed")
	if err != nil {
		return res, fmt.Errorf("restart: %w", err)
	}
	defer nc.Close()
	names := natsjs.NamesFor("agentbus")
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(o.window))
	if err != nil {
		return res, err
	}
	events, err := js.Stream(ctx, names.Events)
	if err != nil {
		return res, err
	}
	res.window = events.CachedInfo().Config.Duplicates
	tm, err := events.GetLastMsgForSubject(ctx, "agentbus.evt.default.*.*.OrderPlaced")
	if err != nil {
		return res, fmt.Errorf("restart: the first command's event: %w", err)
	}
	tpl := newEventTemplate(tm, corr0, restartTag+"-0")
	if !tpl.complete() {
		return res, fmt.Errorf("restart: the first command's event does not hold its ids where expected: %s %v %s", tm.Subject, tm.Header, trunc(tm.Data, 300))
	}

	// The acks, in order: a duplicate means the template kept an id.
	// stored is the last event the stream acknowledged (0: the first
	// command's).
	type published struct {
		i int
		f jetstream.PubAckFuture
	}
	futs := make(chan published, o.window)
	var errsN, dups, stored atomic.Int64
	acksDone := make(chan struct{})
	go func() {
		defer close(acksDone)
		for p := range futs {
			select {
			case a := <-p.f.Ok():
				if a.Duplicate {
					dups.Add(1)
				}
				stored.Store(int64(p.i))
			case <-p.f.Err():
				errsN.Add(1)
			}
		}
	}()
	durables := func() ([]*jetstream.ConsumerInfo, error) {
		var out []*jetstream.ConsumerInfo
		l := events.ListConsumers(ctx)
		for ci := range l.Info() {
			if ci.Config.Durable != "" {
				out = append(out, ci)
			}
		}
		return out, l.Err()
	}
	lag := func() (uint64, error) {
		cs, err := durables()
		var most uint64
		for _, ci := range cs {
			most = max(most, ci.NumPending+uint64(ci.NumAckPending))
		}
		return most, err
	}
	// held says whether agentbus's history holds stored event i: GET
	// /events?correlationId= finds it. The history reads the event log in
	// order, so it then holds every event before i as well.
	held := func(i int64) bool {
		return verifyLookup(client, ab.api, commandCorrelation(restartTag, int(i)), restartTag+"-"+strconv.FormatInt(i, 10)) == nil
	}
	// marks[i] is the last event stored when event i was about to be
	// published: once the history holds marks[i-restartMaxLag], it is
	// within about restartMaxLag events of the seed.
	marks := map[int]int64{}
	n := o.n
	start := time.Now()
	stop := start.Add(o.limit)
	for i := 1; i < n; i++ {
		if i%20_000 == 0 {
			if time.Now().After(stop) {
				res.stopped = fmt.Sprintf("seed stopped after %d of %d events: over the %s limit (-restart-limit)", i, n, o.limit)
				n = i
				break
			}
			marks[i] = stored.Load()
			for {
				l, err := lag()
				if err != nil {
					return res, fmt.Errorf("restart: agentbus's consumers: %w", err)
				}
				if (l <= restartMaxLag && held(marks[i-restartMaxLag])) || time.Now().After(stop) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		for {
			f, err := js.PublishMsgAsync(tpl.msg(restartTag, i), jetstream.WithStallWait(5*time.Second))
			if err == nil {
				futs <- published{i, f}
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				close(futs)
				return res, fmt.Errorf("restart: seed publish %d: %w", i, err)
			}
		}
	}
	close(futs)
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		return res, errors.New("restart: seed acks still pending after 60s")
	}
	<-acksDone
	res.fill = time.Since(start)
	res.n, res.errs, res.dups = n, errsN.Load(), dups.Load()
	cu := time.Now()
	for {
		l, err := lag()
		if err != nil {
			return res, fmt.Errorf("restart: agentbus's consumers: %w", err)
		}
		if l == 0 && held(stored.Load()) {
			break
		}
		if time.Since(cu) > 10*time.Minute {
			return res, fmt.Errorf("restart: 10 minutes after the seed, agentbus's consumers still %d behind, or its history without the last event", l)
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.catchUp = time.Since(cu)
	if info, err := events.Info(ctx); err == nil {
		res.events, res.eventsMiB = info.State.Msgs, float64(info.State.Bytes)/(1<<20)
	}
	// A start rebuilds a stream's duplicate ids from the messages within
	// its window: wait until the last write (the last event) is older.
	w := res.window + 2*time.Second
	time.Sleep(w)
	res.dupWait = w
	return res, nil
}

// eventTemplate is a stored event with the ids of its command marked for
// replacement.
type eventTemplate struct {
	subject          string
	header           nats.Header
	data             string
	corr, event, cmd string
	inSubj, inData   bool
	inHeaderCorr     bool
}

func newEventTemplate(m *jetstream.RawStreamMsg, corr, cmdID string) eventTemplate {
	h := nats.Header{}
	for k, vs := range m.Header {
		// The stored message's expectations and the server's fields of its
		// answer are not the event's to publish again.
		if !strings.HasPrefix(k, "Nats-") || k == "Nats-Msg-Id" {
			h[k] = vs
		}
	}
	t := eventTemplate{subject: m.Subject, header: h, data: string(m.Data), corr: corr,
		event: envelope.EventID(corr, 0, "OrderPlaced"), cmd: cmdID}
	t.inSubj = strings.Contains(t.subject, "."+bus.ShardOf(cmdID)+".") && h.Get(bus.HeaderAggregateID) == cmdID
	t.inData = strings.Contains(t.data, t.event) && strings.Contains(t.data, `"`+cmdID+`"`)
	for _, v := range t.header.Values("Agentbus-Correlation-Id") {
		t.inHeaderCorr = t.inHeaderCorr || v == corr
	}
	return t
}

// complete says whether the template holds the ids where the lookups
// check them: the order id's shard in the subject, the order id in its
// header and the data, the event id in the data, the correlation id in
// its header.
func (t eventTemplate) complete() bool { return t.inSubj && t.inData && t.inHeaderCorr }

// msg is the event of command i of tag.
func (t eventTemplate) msg(tag string, i int) *nats.Msg {
	cmd := tag + "-" + strconv.Itoa(i)
	corr := commandCorrelation(tag, i)
	r := strings.NewReplacer(t.corr, corr, t.event, envelope.EventID(corr, 0, "OrderPlaced"), t.cmd, cmd)
	h := make(nats.Header, len(t.header))
	for k, vs := range t.header {
		for _, v := range vs {
			h[k] = append(h[k], r.Replace(v))
		}
	}
	subject := strings.Replace(t.subject, "."+bus.ShardOf(t.cmd)+".", "."+bus.ShardOf(cmd)+".", 1)
	return &nats.Msg{Subject: subject, Header: h, Data: []byte(r.Replace(t.data))}
}

// lookupResult is the lookups after the second start.
type lookupResult struct {
	looked, found int
	p50, p99, max time.Duration
	firstMiss     string
	firstAt       time.Time
}

// restartLookups looks up, one after the other, k commands spread evenly
// over 0..n-1 (restartSample's round), checking each answer as the
// million stage does; the time is that of the HTTP call.
func restartLookups(p *serveProc, n, k, round int) lookupResult {
	c := newClient(1)
	defer c.CloseIdleConnections()
	idx := restartSample(n, k, round)
	s := timeSample(idx, func(i int) (int, []byte, error) {
		return get(c, p.api+"/events?correlationId="+url.QueryEscape(commandCorrelation(restartTag, i)))
	}, func(i, status int, body []byte) error {
		return checkLookup(commandCorrelation(restartTag, i), restartTag+"-"+strconv.Itoa(i), status, body)
	})
	q := percentiles(s.lat, 0.5, 0.99, 1)
	return lookupResult{looked: len(idx), found: s.ok, p50: q[0], p99: q[1], max: q[2], firstMiss: s.firstMiss, firstAt: s.firstAt}
}

// restartSample is commands spread evenly over 0..n-1, the first of the
// spread first and the others in a random order (the same each time). On
// a grid of 3(k-1)+1 points from 0 to n-1, round 0 is every third point
// from the first: k commands, the oldest (0) and the newest (n-1) among
// them; rounds 1 and 2 are the points after those, k-1 commands each. No
// two rounds share a command when n-1 is at least 3(k-1), so the lookups
// once settled (round 1) and the resubmissions (round 2) read no receipt
// an earlier round read.
func restartSample(n, k, round int) []int {
	grid := int64(3 * max(k-1, 1))
	var idx []int
	for p := int64(round); p <= grid; p += 3 {
		i := int(p * int64(n-1) / grid)
		if len(idx) == 0 || i != idx[len(idx)-1] {
			idx = append(idx, i)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rest := idx[1:]
	rng.Shuffle(len(rest), func(a, b int) { rest[a], rest[b] = rest[b], rest[a] })
	return idx
}

// sampleResult is what timeSample saw.
type sampleResult struct {
	ok        int             // answers check passed
	lat       []time.Duration // their HTTP calls' times
	firstMiss string
	firstAt   time.Time // when the first answer came
}

// timeSample calls send for each command of idx, one after the other,
// timing the call alone, and checks each answer with check.
func timeSample(idx []int, send func(i int) (status int, body []byte, err error), check func(i, status int, body []byte) error) sampleResult {
	res := sampleResult{lat: make([]time.Duration, 0, len(idx))}
	for _, i := range idx {
		t := time.Now()
		status, body, err := send(i)
		d := time.Since(t)
		if res.firstAt.IsZero() {
			res.firstAt = time.Now()
		}
		if err == nil {
			err = check(i, status, body)
		}
		if err != nil {
			if res.firstMiss == "" {
				res.firstMiss = fmt.Sprintf("command %d: %v", i, err)
			}
			continue
		}
		res.ok++
		res.lat = append(res.lat, d)
	}
	return res
}

// resubmitResult is the resubmissions after the lookups.
type resubmitResult struct {
	sent, sameID int
	queued       int64 // messages the command log gained meanwhile
	p50, p99     time.Duration
	firstMiss    string
}

// restartResubmit submits again, one after the other, commands spread
// over the log (restartSample's round 2, none of them looked up), and
// checks that each is answered 202 with the id it was given and that the
// command log gains nothing (the seeded commands are in the history only,
// through their events).
func restartResubmit(p *serveProc, data string, n, k int) (resubmitResult, error) {
	nc, err := p.connect(data, "agentbus-bench-resubmit")
	if err != nil {
		return resubmitResult{}, fmt.Errorf("resubmit: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return resubmitResult{}, err
	}
	last := func() (uint64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, natsjs.NamesFor("agentbus").Commands)
		if err != nil {
			return 0, fmt.Errorf("resubmit: the command log: %w", err)
		}
		return st.CachedInfo().State.LastSeq, nil
	}
	before, err := last()
	if err != nil {
		return resubmitResult{}, err
	}
	c := newClient(1)
	defer c.CloseIdleConnections()
	idx := restartSample(n, k, 2)
	s := timeSample(idx, func(i int) (int, []byte, error) {
		return post(c, p.api+"/commands", commandBody(restartTag, i))
	}, func(i, status int, body []byte) error {
		corr := commandCorrelation(restartTag, i)
		var got struct {
			ID string `json:"id"`
		}
		switch {
		case status != http.StatusAccepted:
			return fmt.Errorf("status %d: %s", status, trunc(body, 200))
		case json.Unmarshal(body, &got) != nil || got.ID != corr:
			return fmt.Errorf("answered %s, want the id %s", trunc(body, 200), corr)
		}
		return nil
	})
	after, err := last()
	if err != nil {
		return resubmitResult{}, err
	}
	q := percentiles(s.lat, 0.5, 0.99)
	return resubmitResult{sent: len(idx), sameID: s.ok, queued: int64(after) - int64(before), p50: q[0], p99: q[1], firstMiss: s.firstMiss}, nil
}

// profileStart starts agentbus once more on the seeded data dir with
// ops.pprof on (a departure from make run's settings) and writes a CPU
// profile of its first o.profileS seconds (from when its operations
// listener answers, a few ms after the start) and its live heap once
// ready and the profile taken, to o.pprofDir.
func profileStart(bin, data, dir string, o restartOptions) error {
	if err := os.MkdirAll(o.pprofDir, 0o755); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "pprof.yaml")
	if err := os.WriteFile(cfg, []byte("ops:\n  pprof: true\n"), 0o600); err != nil {
		return err
	}
	runtime.GC()
	waitQuiet()
	p, err := startServe(bin, data, dir, cfg)
	if err != nil {
		return err
	}
	defer p.stop()
	fetch := func(path, file string) error {
		resp, err := http.Get(p.ops + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", path, resp.Status)
		}
		f, err := os.Create(filepath.Join(o.pprofDir, file))
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(f, resp.Body)
		return err
	}
	for time.Since(p.started) < o.readyWait { // the operations listener serves from the start
		resp, err := http.Get(p.ops + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	at := time.Since(p.started)
	cpuErr := make(chan error, 1)
	go func() {
		cpuErr <- fetch(fmt.Sprintf("/debug/pprof/profile?seconds=%d", o.profileS), "restart-cpu.pb.gz")
	}()
	r, err := p.waitReady(o.readyWait)
	if err != nil {
		return err
	}
	if err := <-cpuErr; err != nil {
		return err
	}
	if err := fetch("/debug/pprof/heap?gc=1", "restart-heap.pb.gz"); err != nil {
		return err
	}
	fmt.Printf("   profiled start (ops.pprof on): ready after %.2f s, RSS %.0f MiB; CPU profile of %d s from %.0f ms after the start,\n",
		r.ready.Seconds(), r.rssMiB, o.profileS, ms(at))
	fmt.Printf("   live heap after it: %s (restart-cpu.pb.gz, restart-heap.pb.gz)\n", o.pprofDir)
	return nil
}
