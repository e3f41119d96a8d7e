package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"
)

// The soak stage (`make soak`, `-only soak`) runs agentbus as `make run`
// does — the built binary, `agentbus serve` in a process of its own with
// the default settings and memory mode, embedded NATS — on a fresh data
// directory and free loopback ports, and sends it PlaceOrder commands at a
// fixed rate for minutes, each on a new order, from an open-loop load
// generator in this process. Each command is timed from its scheduled send
// until its OrderPlaced arrives on the live SSE feed (GET /events,
// Accept: text/event-stream, type=OrderPlaced); every minute the stage
// reads agentbus's RSS (/proc/PID/status VmRSS) and the CPU of agentbus,
// of this process and of the rest of the machine. At the end it looks up a
// sample of the first minute's commands with GET /events?correlationId=.

// soakOptions are the soak stage's settings.
type soakOptions struct {
	bin       string        // the agentbus binary
	rate      float64       // commands per second
	minutes   float64       // sending time
	workers   int           // sender goroutines, one keep-alive connection each
	sample    int           // first-minute commands looked up at the end
	drain     time.Duration // how long to wait for the last events after the sends
	pprofDir  string        // with ops.pprof on: profiles and a trace of the running agentbus, here
	profileAt time.Duration // when, after the first send, the profiles are taken
	cpuMinute bool          // with pprofDir: a CPU profile of every minute of sends too
	settings  string        // YAML added to agentbus's configuration: a departure from make run's, reported
	bare      time.Duration // before agentbus starts: the bare pipeline at rate for this long (0: not run)
}

// soakSettings is the configuration file of -soak-settings, with
// ops.pprof on when pprof: the settings' own ops kept beside it.
func soakSettings(settings string, pprof bool) ([]byte, error) {
	cfg := map[string]any{}
	if err := yaml.Unmarshal([]byte(settings), &cfg); err != nil {
		return nil, fmt.Errorf("-soak-settings: %w", err)
	}
	if pprof {
		ops, _ := cfg["ops"].(map[string]any)
		if ops == nil {
			ops = map[string]any{}
		}
		ops["pprof"] = true
		cfg["ops"] = ops
	}
	return yaml.Marshal(cfg)
}

// soakTag starts every soak command's id and order id.
const soakTag = "soak"

// soakLookupLimit bounds the lookups at the end, all of them together.
const soakLookupLimit = time.Minute

// soakMinute is one minute's figures, by the minute its commands were
// scheduled in.
type soakMinute struct {
	sent, accepted, httpErrs int64
	rssMiB                   float64 // agentbus's RSS at the minute's end
	abCPU, genCPU, others    float64 // cores over the minute
	live                     string  // what the minute's line said as it ended
}

type soakRun struct {
	o       soakOptions
	base    string // agentbus's API
	ops     string // its operations listener
	start   time.Time
	total   int
	perMin  int
	seenUS  []int32 // per command: microseconds from scheduled send to its event, +1; 0 = not seen
	dups    int64   // events seen twice (read by the follower only, then after it ends)
	reconn  atomic.Int64
	gotLive chan struct{}
	arrMu   sync.Mutex
	arrived []int32 // latencies (µs) of the events that arrived in the current minute
	minutes []soakMinute
	acks    []*histogram // per minute, POST -> 202
	firstE  atomic.Value // string: the first HTTP error
	warns   *warnLog
	bare    *latencyResult // the bare pipeline's run before agentbus, when o.bare > 0
}

func soakStage(o soakOptions, rep *report) error {
	if o.rate <= 0 || o.minutes <= 0 || o.workers < 1 {
		return errors.New("soak: -soak-rate, -soak-minutes and -soak-workers must be positive")
	}
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("soak: the agentbus binary: %w (make build, or -soak-agentbus)", err)
	}
	dir, err := os.MkdirTemp("", "agentbus-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var config []string // agentbus's --config, when the stage departs from make run's settings
	if o.pprofDir != "" || o.settings != "" {
		settings, err := soakSettings(o.settings, o.pprofDir != "")
		if err != nil {
			return err
		}
		cfg := filepath.Join(dir, "settings.yaml")
		if err := os.WriteFile(cfg, settings, 0o600); err != nil {
			return err
		}
		config = []string{"--config", cfg}
	}
	fmt.Printf("9. Soak: agentbus as make run starts it (%s serve, default settings and memory mode, embedded NATS, fresh data dir%s),\n", o.bin, map[bool]string{true: ", ops.pprof on", false: ""}[o.pprofDir != ""])
	if o.settings != "" {
		fmt.Printf("   NOT make run's settings: with %q (-soak-settings)\n", o.settings)
	}
	fmt.Printf("   %.0f PlaceOrder commands/s, each a new order, for %g minutes, open loop from %d senders on keep-alive connections;\n", o.rate, o.minutes, o.workers)
	fmt.Printf("   each timed from its scheduled send until its OrderPlaced arrives on GET /events (text/event-stream, type=OrderPlaced)\n")
	fmt.Printf("   %s  nproc=%d  loadavg %s  (the machine may be shared: \"others\" is the CPU every other process used)\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), loadAvg())
	// The bare pipeline runs before the ports are chosen: it takes ports
	// of its own meanwhile.
	var bare *latencyResult
	if o.bare > 0 {
		b, err := runBare(o.rate, 5*time.Second, o.bare, 5*time.Second, o.workers)
		if err != nil {
			return fmt.Errorf("soak: the bare pipeline: %w", err)
		}
		bare = &b
		fmt.Printf("   first, the box in this sitting: the bare pipeline (refpipe.go, in this process) at %.0f/s for %s: command -> event p50 %.2f / p99 %.2f ms,\n", o.rate, o.bare, ms(b.VisP50), ms(b.VisP99))
		fmt.Printf("   %.0f µs of CPU per command (pipeline, its NATS server and its generator), %.2f cores; others %.2f cores; %d never visible\n",
			b.cpuPerCommand(), b.CPU.Own, b.CPU.Others(), b.NeverVisible)
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	args := []string{"serve", "--listen", ports[0], "--ops-listen", ports[1], "--nats-listen", ports[2], "--data", filepath.Join(dir, "data")}
	args = append(args, config...)
	cmd := exec.Command(bin, args...)
	// make run passes the caller's AGENTBUS_* variables on; here they
	// would change the defaults the stage measures.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGENTBUS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	logf, err := os.Create(filepath.Join(dir, "agentbus.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	s := &soakRun{o: o, base: "http://" + ports[0], ops: "http://" + ports[1], gotLive: make(chan struct{}), warns: &warnLog{}, bare: bare}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("soak: start agentbus: %w", err)
	}
	logDone := make(chan struct{})
	go func() { defer close(logDone); s.warns.copy(stderr, logf) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		<-logDone
	}
	defer stop()
	pid := strconv.Itoa(cmd.Process.Pid)
	if err := waitReady(s.ops+"/readyz", 90*time.Second); err != nil {
		return fmt.Errorf("soak: %w; agentbus said: %s", err, s.warns.last())
	}
	fmt.Printf("   agentbus pid %s ready: API %s, ops %s, RSS %.0f MiB\n", pid, s.base, s.ops, mib(procStatusOf(pid, "VmRSS")))

	s.total = int(o.rate * o.minutes * 60)
	s.perMin = int(o.rate * 60)
	s.seenUS = make([]int32, s.total)
	nMin := (s.total + s.perMin - 1) / s.perMin
	s.minutes = make([]soakMinute, nMin)
	for range nMin {
		s.acks = append(s.acks, newHistogram())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	followDone := make(chan struct{})
	var seen atomic.Int64
	go func() { defer close(followDone); s.follow(ctx, &seen) }()
	select {
	case <-s.gotLive:
	case <-time.After(30 * time.Second):
		return errors.New("soak: the SSE feed did not start within 30s")
	}

	s.start = time.Now().Add(50 * time.Millisecond)
	sendsDone := make(chan struct{})
	go func() { defer close(sendsDone); s.send() }()
	if o.pprofDir != "" {
		go s.profile(pid, &seen)
	}
	if o.pprofDir != "" && o.cpuMinute {
		go s.profileMinutes()
	}

	// One line per minute, as it ends.
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "minute\tsent\t202\tHTTP errors\tevents arrived\tthose: p50 ms\tp99 ms\t202 p99 ms\tagentbus RSS MiB\tagentbus CPU\tgenerator CPU\tothers CPU\t"
	prevAB, prevGen, prevM := procCPU(pid), ownCPU(), sampleCPU()
	for m := range nMin {
		end := s.start.Add(time.Duration(m+1) * time.Minute)
		if m == nMin-1 {
			end = s.start.Add(time.Duration(float64(s.total) / o.rate * float64(time.Second)))
		}
		time.Sleep(time.Until(end))
		ab, gen, mach := procCPU(pid), ownCPU(), sampleCPU()
		wall := mach.at.Sub(prevM.at).Seconds()
		mu := cpuBetween(prevM, mach, runtime.NumCPU())
		mm := &s.minutes[m]
		mm.rssMiB = mib(procStatusOf(pid, "VmRSS"))
		mm.abCPU = (ab - prevAB).Seconds() / wall
		mm.genCPU = (gen - prevGen).Seconds() / wall
		mm.others = max(mu.Machine-mm.abCPU-mm.genCPU, 0)
		prevAB, prevGen, prevM = ab, gen, mach
		s.arrMu.Lock()
		arr := s.arrived
		s.arrived = nil
		s.arrMu.Unlock()
		p50, p99 := pctUS(arr, 0.50), pctUS(arr, 0.99)
		mm.live = fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%.0f\t%.2f\t%.2f\t%.2f\t", m+1, atomic.LoadInt64(&mm.sent), atomic.LoadInt64(&mm.accepted), atomic.LoadInt64(&mm.httpErrs), len(arr), p50, p99,
			fms(s.acks[m].quantile(0.99)), mm.rssMiB, mm.abCPU, mm.genCPU, mm.others)
		fmt.Fprintln(tw, head)
		fmt.Fprintln(tw, mm.live)
		tw.Flush()
		if w := s.warns.take(); len(w) > 0 {
			fmt.Printf("   agentbus warned: %s\n", strings.Join(w, " | "))
		}
	}
	<-sendsDone
	// The last events, up to o.drain.
	deadline := time.Now().Add(o.drain)
	for seen.Load() < int64(s.total) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	drainEnd := time.Now()
	cancel()
	<-followDone
	endRSS := mib(procStatusOf(pid, "VmRSS"))

	found, looked, firstMiss := s.lookups()
	hwm := mib(procStatusOf(pid, "VmHWM"))
	stop()
	s.report(rep, drainEnd, endRSS, hwm, found, looked, firstMiss)
	return nil
}

// send paces the commands: command i is due at start + i/rate; senders take
// them in order as they come due (open loop: a slow answer delays the
// sends queued behind it, and that delay is in their times).
func (s *soakRun) send() {
	due := make(chan int, int(s.o.rate*120))
	var wg sync.WaitGroup
	pre, mid, post := soakTemplate()
	for range s.o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := newRawConn(s.base + "/commands")
			if err != nil {
				panic(err) // the URL is this stage's own
			}
			defer rc.close()
			body := make([]byte, 0, 512)
			for i := range due {
				id := strconv.AppendInt([]byte(soakTag+"-"), int64(i), 10)
				body = append(append(append(append(append(body[:0], pre...), id...), mid...), id...), post...)
				m := &s.minutes[i/s.perMin]
				atomic.AddInt64(&m.sent, 1)
				t0 := time.Now()
				status, ans, err := rc.post(body)
				switch {
				case err != nil:
					atomic.AddInt64(&m.httpErrs, 1)
					s.firstE.CompareAndSwap(nil, err.Error())
				case status != http.StatusAccepted:
					atomic.AddInt64(&m.httpErrs, 1)
					s.firstE.CompareAndSwap(nil, fmt.Sprintf("%d %s", status, ans))
				default:
					atomic.AddInt64(&m.accepted, 1)
					s.acks[i/s.perMin].add(time.Since(t0))
				}
			}
		}()
	}
	interval := float64(time.Second) / s.o.rate
	next := 0
	for next < s.total {
		now := time.Since(s.start)
		for next < s.total && time.Duration(float64(next)*interval) <= now {
			due <- next
			next++
		}
		time.Sleep(time.Millisecond)
	}
	close(due)
	wg.Wait()
}

// soakTemplate is commandBody(soakTag, i) around the two places i goes.
func soakTemplate() (pre, mid, post []byte) {
	b := commandBody("\x00", 0)
	parts := bytes.Split(b, []byte("\x00-0"))
	if len(parts) != 3 {
		panic("soak: command template")
	}
	return parts[0], parts[1], parts[2]
}

// sched is when command i was due.
func (s *soakRun) sched(i int) time.Time {
	return s.start.Add(time.Duration(float64(i) * float64(time.Second) / s.o.rate))
}

// follow reads the live OrderPlaced feed until ctx ends, reconnecting with
// Last-Event-ID when the stream ends, and times each event.
func (s *soakRun) follow(ctx context.Context, seen *atomic.Int64) {
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}
	lastID := ""
	key := []byte(`"orderId":"` + soakTag + "-")
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/events?type=OrderPlaced", nil)
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := client.Do(req)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			s.firstE.CompareAndSwap(nil, fmt.Sprintf("SSE: %d %s", resp.StatusCode, b))
			time.Sleep(time.Second)
			continue
		}
		br := bufio.NewReaderSize(resp.Body, 256<<10)
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				if errors.Is(err, bufio.ErrBufferFull) {
					for errors.Is(err, bufio.ErrBufferFull) { // not ours: skip it
						_, err = br.ReadSlice('\n')
					}
					if err == nil {
						continue
					}
				}
				break
			}
			switch {
			case bytes.HasPrefix(line, []byte("id: ")):
				lastID = string(bytes.TrimRight(line[4:], "\r\n"))
			case bytes.HasPrefix(line, []byte("data: ")):
				now := time.Now()
				k := bytes.Index(line, key)
				if k < 0 {
					continue
				}
				rest := line[k+len(key):]
				n := 0
				for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
					n++
				}
				i, err := strconv.Atoi(string(rest[:n]))
				if err != nil || i < 0 || i >= s.total {
					continue
				}
				if s.seenUS[i] != 0 {
					s.dups++
					continue
				}
				us := int32(min(now.Sub(s.sched(i)).Microseconds(), 1<<31-2))
				s.seenUS[i] = max(us, 0) + 1
				seen.Add(1)
				s.arrMu.Lock()
				s.arrived = append(s.arrived, max(us, 0))
				s.arrMu.Unlock()
			case bytes.HasPrefix(line, []byte(": live")):
				select {
				case <-s.gotLive:
				default:
					close(s.gotLive)
				}
			}
		}
		resp.Body.Close()
		if ctx.Err() == nil {
			s.reconn.Add(1)
		}
	}
}

// lookups asks GET /events?correlationId= for an even sample of the first
// minute's commands and counts those that return their OrderPlaced; a
// lookup not answered by soakLookupLimit after the first counts as not
// found.
func (s *soakRun) lookups() (found, looked int, firstMiss string) {
	n := min(s.o.sample, s.perMin, s.total)
	c := newClient(4)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), soakLookupLimit)
	defer cancel()
	first := min(s.perMin, s.total)
	for k := range n {
		i := k * first / n
		corr := commandCorrelation(soakTag, i)
		looked++
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/events?correlationId="+url.QueryEscape(corr), nil)
		resp, err := c.Do(req)
		if err != nil {
			if firstMiss == "" {
				firstMiss = err.Error()
			}
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		want := fmt.Sprintf(`"orderId":"%s-%d"`, soakTag, i)
		if resp.StatusCode == http.StatusOK && bytes.Contains(b, []byte(want)) && bytes.Contains(b, []byte(`"OrderPlaced"`)) {
			found++
		} else if firstMiss == "" {
			firstMiss = fmt.Sprintf("%s: %d %.200s", corr, resp.StatusCode, b)
		}
	}
	return found, looked, firstMiss
}

// profile takes, at o.profileAt, the agentbus process's allocations
// (before and after), a 5-second execution trace, a 10-second CPU
// profile, its goroutines and its live heap from its /debug/pprof/, into
// o.pprofDir.
func (s *soakRun) profile(pid string, seen *atomic.Int64) {
	time.Sleep(time.Until(s.start.Add(s.o.profileAt)))
	if err := os.MkdirAll(s.o.pprofDir, 0o755); err != nil {
		fmt.Printf("   profile: %v\n", err)
		return
	}
	get := func(path, file string) {
		if err := s.fetchProfile(path, file); err != nil {
			fmt.Printf("   profile %s: %v\n", path, err)
		}
	}
	n0, t0 := seen.Load(), time.Now()
	get("/debug/pprof/allocs", "allocs.base.pb.gz")
	get("/debug/pprof/trace?seconds=5", "trace.out")
	if !s.o.cpuMinute { // the process takes one CPU profile at a time
		get("/debug/pprof/profile?seconds=10", "cpu.pb.gz")
	}
	get("/debug/pprof/allocs", "allocs.pb.gz")
	get("/debug/pprof/goroutine", "goroutine.pb.gz")
	get("/debug/pprof/heap?gc=1", "heap.pb.gz")
	fmt.Printf("   profiles of agentbus (pid %s) written to %s: %d events in the %s between the two allocs profiles\n", pid, s.o.pprofDir, seen.Load()-n0, time.Since(t0).Round(100*time.Millisecond))
}

// profileMinutes takes a CPU profile of each minute of sends, from the
// first send on, into o.pprofDir/cpu-minute-NN.pb.gz (NN from 1, as the
// report counts minutes): a minute whose p99 stands out can be set beside
// one that does not.
func (s *soakRun) profileMinutes() {
	if err := os.MkdirAll(s.o.pprofDir, 0o755); err != nil {
		fmt.Printf("   profile: %v\n", err)
		return
	}
	for m := range len(s.minutes) {
		time.Sleep(time.Until(s.start.Add(time.Duration(m) * time.Minute)))
		if err := s.fetchProfile("/debug/pprof/profile?seconds=59", fmt.Sprintf("cpu-minute-%02d.pb.gz", m+1)); err != nil {
			fmt.Printf("   CPU profile of minute %d: %v\n", m+1, err)
		}
	}
}

// fetchProfile writes what agentbus's ops listener answers at path to
// file in o.pprofDir.
func (s *soakRun) fetchProfile(path, file string) error {
	resp, err := http.Get(s.ops + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(filepath.Join(s.o.pprofDir, file))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (s *soakRun) report(rep *report, drainEnd time.Time, endRSS, hwm float64, found, looked int, firstMiss string) {
	fmt.Println()
	fmt.Printf("   by the minute each command was due (a command whose event never arrived counts as due until the wait ended, %s after the last send: its time is a floor)\n", s.o.drain)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "minute\tcommands\tevent seen\tnot seen\tp50 ms\tp99 ms\tmax ms\tover 50 ms %\tagentbus RSS MiB\tagentbus CPU\tgenerator CPU\tothers CPU\t")
	var notSeen, accepted, errs int64
	var p99s, p50s []float64
	var genCPU, abCPU float64
	for m := range s.minutes {
		lo, hi := m*s.perMin, min((m+1)*s.perMin, s.total)
		lat := make([]time.Duration, 0, hi-lo)
		miss, over := 0, 0
		for i := lo; i < hi; i++ {
			d := time.Duration(s.seenUS[i]-1) * time.Microsecond
			if s.seenUS[i] == 0 {
				miss++
				d = drainEnd.Sub(s.sched(i))
			}
			if d > 50*time.Millisecond {
				over++
			}
			lat = append(lat, d)
		}
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[min(int(p*float64(len(lat))), len(lat)-1)] }
		mm := s.minutes[m]
		notSeen += int64(miss)
		accepted += mm.accepted
		errs += mm.httpErrs
		genCPU += mm.genCPU
		abCPU += mm.abCPU
		p50s, p99s = append(p50s, ms(q(0.5))), append(p99s, ms(q(0.99)))
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%s\t%s\t%.2f\t%.0f\t%.2f\t%.2f\t%.2f\t\n", m+1, hi-lo, hi-lo-miss, miss, fms(q(0.5)), fms(q(0.99)), fms(lat[len(lat)-1]),
			100*float64(over)/float64(len(lat)), mm.rssMiB, mm.abCPU, mm.genCPU, mm.others)
		rep.add(fmt.Sprintf("soak.minute.%d.p50", m+1), ms(q(0.5)), "ms")
		rep.add(fmt.Sprintf("soak.minute.%d.p99", m+1), ms(q(0.99)), "ms")
		rep.add(fmt.Sprintf("soak.minute.%d.not_seen", m+1), float64(miss), "commands")
		rep.add(fmt.Sprintf("soak.minute.%d.rss_mib", m+1), mm.rssMiB, "MiB")
		rep.add(fmt.Sprintf("soak.minute.%d.agentbus_cpu", m+1), mm.abCPU, "cores")
		rep.add(fmt.Sprintf("soak.minute.%d.others_cpu", m+1), mm.others, "cores")
	}
	tw.Flush()
	n := len(s.minutes)
	foundFrac := 0.0
	if looked > 0 {
		foundFrac = float64(found) / float64(looked)
	}
	fmt.Printf("   commands %d, accepted %d, HTTP errors %d, events not seen %d, seen twice %d, feed reconnects %d; agentbus RSS at the end %.0f MiB (peak %.0f MiB)\n",
		s.total, accepted, errs, notSeen, s.dups, s.reconn.Load(), endRSS, hwm)
	if e, _ := s.firstE.Load().(string); e != "" {
		fmt.Printf("   first error: %.300s\n", e)
	}
	fmt.Printf("   GET /events?correlationId= for %d of the first minute's commands, at the end: %d returned their OrderPlaced", looked, found)
	if firstMiss != "" {
		fmt.Printf(" (first miss: %.300s)", firstMiss)
	}
	fmt.Println()
	fmt.Printf("   agentbus log: %d warnings and errors in all%s\n", s.warns.count(), s.warns.firstText())
	fmt.Printf("   loadavg at the end %s\n", loadAvg())
	fmt.Println()
	lastRSS := s.minutes[n-1].rssMiB
	rep.add("soak.p50.first_minute", p50s[0], "ms")
	rep.add("soak.p50.last_minute", p50s[n-1], "ms")
	rep.add("soak.p99.first_minute", p99s[0], "ms")
	rep.add("soak.p99.last_minute", p99s[n-1], "ms")
	if n >= 5 {
		rep.add("soak.rss_mib.minute5", s.minutes[4].rssMiB, "MiB")
	} else {
		rep.figures = append(rep.figures, figure{Figure: "soak.rss_mib.minute5", Value: -1, Unit: "MiB", Note: fmt.Sprintf("the run had %d minutes", n)})
	}
	rep.add("soak.rss_mib.last", lastRSS, "MiB")
	rep.add("soak.rss_mib.peak", hwm, "MiB")
	rep.add("soak.first_commands_found", foundFrac, "fraction")
	rep.add("soak.not_seen", float64(notSeen), "commands")
	rep.add("soak.http_errors", float64(errs), "requests")
	rep.add("soak.rate", s.o.rate, "commands/s")
	rep.add("soak.minutes", s.o.minutes, "minutes")
	rep.add("soak.agentbus_cpu", abCPU/float64(n), "cores")
	rep.add("soak.generator_cpu", genCPU/float64(n), "cores")
	rep.add("soak.agentbus_warnings", float64(s.warns.count()), "lines")
	ratio := p99s[n-1] / p99s[0]
	rssOK := n < 5 || lastRSS <= 1.2*s.minutes[4].rssMiB
	rep.row(fmt.Sprintf("soak %g min @%.0f/s: p99 first / last minute ms", s.o.minutes, s.o.rate), fmt.Sprintf("%.1f / %.1f (%.2fx)", p99s[0], p99s[n-1], ratio), "last <= 1.5x first and <= 50", verdict(ratio <= 1.5 && p99s[n-1] <= 50))
	if n >= 5 {
		rep.row("soak: agentbus RSS minute 5 / end, MiB", fmt.Sprintf("%.0f / %.0f", s.minutes[4].rssMiB, lastRSS), "end <= 1.2x minute 5", verdict(rssOK))
	} else {
		rep.row("soak: agentbus RSS first / end minute, MiB", fmt.Sprintf("%.0f / %.0f", s.minutes[0].rssMiB, lastRSS), "(needs 5 minutes)", "")
	}
	rep.row("soak: first minute's commands found at the end", fmt.Sprintf("%d/%d", found, looked), "all", verdict(looked > 0 && found == looked))
	rep.row("soak: generator CPU, cores (mean of the minutes)", fmt.Sprintf("%.2f", genCPU/float64(n)), "", "")
	if b := s.bare; b != nil && b.cpuPerCommand() > 0 {
		// Like with like: agentbus and the generator that feeds and follows
		// it, against the bare pipeline, its NATS server and its generator,
		// all in the bench process.
		perCmd := (abCPU + genCPU) / float64(n) / s.o.rate * 1e6
		barePerCmd := b.cpuPerCommand()
		rep.add("soak.bare.p50", ms(b.VisP50), "ms")
		rep.add("soak.bare.p99", ms(b.VisP99), "ms")
		rep.add("soak.bare.cpu_per_command", barePerCmd, "µs")
		rep.add("soak.cpu_per_command", perCmd, "µs")
		rep.row(fmt.Sprintf("soak: the bare pipeline at %.0f/s for %s first (the box in this sitting): p50 / p99 ms", s.o.rate, s.o.bare), fmt.Sprintf("%.2f / %.2f", ms(b.VisP50), ms(b.VisP99)), "", "")
		rep.row("soak: CPU per command, agentbus and generator / the bare pipeline and its generator, µs", fmt.Sprintf("%.0f / %.0f (%.2fx)", perCmd, barePerCmd, perCmd/barePerCmd), "", "")
	}
}

// pctUS is the p quantile of latencies in µs, as milliseconds text.
func pctUS(us []int32, p float64) string {
	if len(us) == 0 {
		return "-"
	}
	slices.Sort(us)
	return fmt.Sprintf("%.1f", float64(us[min(int(p*float64(len(us))), len(us)-1)])/1e3)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// freePorts returns n loopback addresses that were free a moment ago.
func freePorts(n int) ([]string, error) {
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

func waitReady(u string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("not ready at %s within %s", u, timeout)
}

// procCPU is the CPU time process pid has used (user + system).
func procCPU(pid string) time.Duration {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after it.
	_, rest, ok := bytes.Cut(b, []byte(") "))
	if !ok {
		return 0
	}
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)       // utime, field 14
	k, _ := strconv.ParseInt(f[12], 10, 64)       // stime, field 15
	return time.Duration(u+k) * time.Second / 100 // USER_HZ
}

// ownCPU is the CPU time this process has used.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// warnLog copies agentbus's log to a file and keeps its warnings and
// errors: a count, the first, and those not yet shown.
type warnLog struct {
	mu     sync.Mutex
	n      int
	first  string
	recent []string
	tail   string
}

func (w *warnLog) copy(r io.Reader, to io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(to, line)
		w.mu.Lock()
		w.tail = line
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			if !strings.Contains(line, "webhook signing secrets are encrypted with a key agentbus generated") { // every fresh data dir says it
				w.n++
				if w.first == "" {
					w.first = line
				}
				if len(w.recent) < 5 {
					w.recent = append(w.recent, trimLog(line))
				}
			}
		}
		w.mu.Unlock()
	}
}

func trimLog(line string) string {
	if len(line) > 300 {
		return line[:300] + "…"
	}
	return line
}

func (w *warnLog) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.recent
	w.recent = nil
	return r
}

func (w *warnLog) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func (w *warnLog) firstText() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first == "" {
		return ""
	}
	return "; the first: " + trimLog(w.first)
}

func (w *warnLog) last() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tail
}

// histogram counts durations in buckets about 2 % wide, from 1 µs to
// about 10 minutes, safe for concurrent adds.
type histogram struct{ counts []atomic.Int64 }

const (
	histPerOctave = 32
	histOctaves   = 30 // 2^30 µs ≈ 18 minutes
)

func newHistogram() *histogram {
	return &histogram{counts: make([]atomic.Int64, histPerOctave*histOctaves+1)}
}

func histBucket(d time.Duration) int {
	us := float64(d.Microseconds())
	if us < 1 {
		return 0
	}
	b := int(math.Log2(us) * histPerOctave)
	return min(b, histPerOctave*histOctaves)
}

func (h *histogram) add(d time.Duration) { h.counts[histBucket(d)].Add(1) }

// quantile is the upper edge of the bucket holding the p quantile.
func (h *histogram) quantile(p float64) time.Duration {
	var total int64
	for i := range h.counts {
		total += h.counts[i].Load()
	}
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(p * float64(total)))
	var n int64
	for i := range h.counts {
		n += h.counts[i].Load()
		if n >= rank {
			return time.Duration(math.Exp2(float64(i+1)/histPerOctave) * float64(time.Microsecond))
		}
	}
	return 0
}
