package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/nats-io/nats.go"
)

// latencyResult is the open-loop command -> event-visible run.
type latencyResult struct {
	Measured               int     // commands scheduled in the measured window
	Achieved               float64 // commands/s actually sent in the window
	VisP50, VisP99, VisMax time.Duration
	VisOver                float64       // share of the measured commands visible after latencyTarget, or never
	AckP50, AckP99         time.Duration // POST /commands answered 202
	LagP99, LagMax         time.Duration // send start behind schedule
	NeverVisible           int           // not visible within the visibility timeout
	Rejected               int64
	HTTPErrors             int
	FirstErr               string
	Verified, VerifyTotal  int
	VerifiedFirst          int           // on the first GET, right when the event was seen
	VerifyLate             time.Duration // the longest a sampled GET needed after that
	VerifyVisible          int           // sampled commands that became visible before the run ended (and so were looked up)
	VerifyErr              string
	Logs                   string
	CPU                    cpuUse
	// AllocPerCmd is the heap the whole process allocated from the first
	// send (warm-up included) until every command was visible or the
	// visibility timeout, per command sent: unlike CPU.Alloc it includes
	// the processing that falls behind the sends.
	AllocPerCmd float64
}

// cpuPerCommand is this process's CPU per command sent in the measured
// window, in µs (0 when none was sent).
func (r latencyResult) cpuPerCommand() float64 {
	if r.Achieved <= 0 {
		return 0
	}
	return r.CPU.Own / r.Achieved * 1e6
}

// target is what a latency round sends commands to and observes: agentbus,
// or the bare reference pipeline (refpipe.go).
type target interface {
	url() string
	// observer is a connection of its own to the target's NATS server, as
	// an outside client's.
	observer() (*nats.Conn, error)
	// logs summarises the warnings the target logged, or says "none".
	logs() string
}

func (a *abServer) url() string { return a.URL }
func (a *abServer) observer() (*nats.Conn, error) {
	if a.ext != nil { // the server itself, not through a proxy agentbus may be given
		return nats.Connect(a.ext.ClientURL(), nats.Name("bench-observer"))
	}
	return a.Conn.Dial("bench-observer")
}
func (a *abServer) logs() string { return a.warns.Summary() }

// dumpPath, when set (-latency-csv), receives one line per command.
var dumpPath string

// runLatency sends PlaceOrder commands to tg at a fixed rate (open loop: the
// send times are fixed in advance, whatever the answers) for warm+dur, and
// measures, for the commands scheduled after warm, the time from the
// scheduled send until the event is visible. Latencies are taken from the
// scheduled time, so a stalled sender cannot hide queueing (no coordinated
// omission); LagP99 shows the sender kept to its schedule.
func runLatency(tg target, rate float64, warm, dur, visTimeout time.Duration, workers, sample int, during func() func()) (latencyResult, error) {
	var res latencyResult
	interval := time.Duration(float64(time.Second) / rate)
	warmN := int(warm.Seconds() * rate)
	n := warmN + int(dur.Seconds()*rate)
	bodies := make([][]byte, n)
	corrs := make([]string, n)
	for i := range n {
		bodies[i] = commandBody("lat", i)
		corrs[i] = commandCorrelation("lat", i)
	}
	sampled := map[int]bool{}
	for len(sampled) < min(sample, n-warmN) {
		sampled[warmN+rand.IntN(n-warmN)] = true
	}
	verifyClient := newClient(4)
	// Lookups start only until verifyClosed is set (under verifyMu): an
	// event seen after that neither adds to verifyWG while it is waited
	// for nor writes res once it is returned.
	var verifyWG sync.WaitGroup
	var verifyMu sync.Mutex
	verifyClosed := false
	onVisible := func(i int) {
		if !sampled[i] {
			return
		}
		seen := time.Now()
		verifyMu.Lock()
		defer verifyMu.Unlock()
		if verifyClosed {
			return
		}
		res.VerifyVisible++
		verifyWG.Add(1)
		go func() {
			defer verifyWG.Done()
			tries, err := verifyUntil(verifyClient, tg.url(), corrs[i], fmt.Sprintf("lat-%d", i), time.Second)
			late := time.Since(seen)
			verifyMu.Lock()
			defer verifyMu.Unlock()
			if err != nil {
				if res.VerifyErr == "" {
					res.VerifyErr = err.Error()
				}
				return
			}
			res.Verified++
			if tries == 1 {
				res.VerifiedFirst++
			} else {
				res.VerifyLate = max(res.VerifyLate, late)
			}
		}()
	}
	tr, err := newTracker(tg, corrs, onVisible)
	if err != nil {
		return res, err
	}
	defer tr.close()

	// One keep-alive connection per sender, opened before the clock starts.
	conns := make([]*rawConn, workers)
	for w := range conns {
		rc, err := newRawConn(senderURL(tg, w) + "/commands")
		if err == nil {
			err = rc.dial()
		}
		if err != nil {
			for _, c := range conns[:w] {
				c.close()
			}
			return res, err
		}
		defer rc.close()
		conns[w] = rc
	}

	sched := make([]int64, n)
	sendAt := make([]int64, n)
	ackAt := make([]int64, n)
	jobs := make(chan int, n)
	var httpErrs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for _, rc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				sendAt[i] = time.Now().UnixNano()
				status, body, err := rc.post(bodies[i])
				ackAt[i] = time.Now().UnixNano()
				if err != nil || status != http.StatusAccepted {
					httpErrs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %v %s", status, err, trunc(body, 200)))
				}
			}
		}()
	}
	var stop func()
	var cpuA cpuSample
	start := time.Now().Add(20 * time.Millisecond)
	allocA := sampleCPU().alloc
	for i := range n {
		if i == warmN {
			cpuA = sampleCPU()
			if during != nil {
				stop = during()
			}
		}
		target := start.Add(time.Duration(i) * interval)
		if d := time.Until(target); d > 0 {
			time.Sleep(d)
		}
		sched[i] = target.UnixNano()
		jobs <- i
	}
	close(jobs)
	res.CPU = cpuBetween(cpuA, sampleCPU(), runtime.NumCPU())
	lastSched := time.Unix(0, sched[n-1])
	tr.wait(time.Until(lastSched.Add(visTimeout)))
	res.AllocPerCmd = float64(sampleCPU().alloc-allocA) / float64(n)
	if stop != nil {
		stop()
	}
	wg.Wait()
	verifyMu.Lock()
	verifyClosed = true
	verifyMu.Unlock()
	verifyWG.Wait()

	if dumpPath != "" {
		if f, err := os.Create(dumpPath); err == nil {
			// -1: did not happen within the run.
			fmt.Fprintln(f, "i,sched_ms,lag_ms,ack_ms,visible_ms")
			for i := range n {
				rel := func(v int64) float64 {
					if v == 0 {
						return -1
					}
					return float64(v-sched[i]) / 1e6
				}
				fmt.Fprintf(f, "%d,%.3f,%.3f,%.3f,%.3f\n", i, float64(sched[i]-sched[0])/1e6, rel(sendAt[i]), rel(ackAt[i]), rel(tr.visible[i].Load()))
			}
			f.Close()
		}
	}
	var vis, ack, lag []time.Duration
	for i := warmN; i < n; i++ {
		s := sched[i]
		lag = append(lag, time.Duration(sendAt[i]-s))
		ack = append(ack, time.Duration(ackAt[i]-s))
		if v := tr.visible[i].Load(); v != 0 && time.Duration(v-s) <= visTimeout {
			vis = append(vis, time.Duration(v-s))
		} else {
			res.NeverVisible++
			vis = append(vis, never)
		}
	}
	res.Measured = n - warmN
	if span := sendAt[n-1] - sendAt[warmN]; span > 0 {
		res.Achieved = float64(n-warmN-1) / time.Duration(span).Seconds()
	}
	for _, v := range vis {
		if v > latencyTarget {
			res.VisOver++
		}
	}
	res.VisOver /= float64(max(len(vis), 1))
	p := percentiles(vis, 0.5, 0.99, 1)
	res.VisP50, res.VisP99, res.VisMax = p[0], p[1], p[2]
	p = percentiles(ack, 0.5, 0.99)
	res.AckP50, res.AckP99 = p[0], p[1]
	p = percentiles(lag, 0.99, 1)
	res.LagP99, res.LagMax = p[0], p[1]
	res.Rejected = tr.rejected.Load()
	res.HTTPErrors = int(httpErrs.Load())
	if v, ok := firstErr.Load().(string); ok {
		res.FirstErr = v
	}
	res.VerifyTotal = len(sampled)
	res.Logs = tg.logs()
	return res, nil
}

// never stands for "not within the timeout" in latency lists.
const never = time.Duration(1<<63 - 1)

// verifyUntil retries verifyLookup every millisecond until it passes or
// timeout, returning the number of GETs made.
func verifyUntil(c *http.Client, base, corr, cmdID string, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for tries := 1; ; tries++ {
		err := verifyLookup(c, base, corr, cmdID)
		if err == nil {
			return tries, nil
		}
		if time.Now().After(deadline) {
			return tries, err
		}
		time.Sleep(time.Millisecond)
	}
}

// verifyLookup checks that GET /events?correlationId=corr returns exactly the
// OrderPlaced event of command cmdID (deterministic event id, same orderId).
func verifyLookup(c *http.Client, base, corr, cmdID string) error {
	status, body, err := get(c, base+"/events?correlationId="+url.QueryEscape(corr))
	if err != nil {
		return err
	}
	return checkLookup(corr, cmdID, status, body)
}

// checkLookup checks one GET /events?correlationId= answer (see verifyLookup).
func checkLookup(corr, cmdID string, status int, body []byte) error {
	if status != http.StatusOK {
		return fmt.Errorf("GET /events?correlationId=%s: %d %s", corr, status, trunc(body, 200))
	}
	var page struct {
		Events []struct {
			ID   string `json:"id"`
			Type string `json:"type"`
			Data struct {
				OrderID string `json:"orderId"`
			} `json:"data"`
		} `json:"events"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return fmt.Errorf("GET /events?correlationId=%s: %v", corr, err)
	}
	if len(page.Events) != 1 {
		return fmt.Errorf("GET /events?correlationId=%s: want 1 event, got %d: %s", corr, len(page.Events), trunc(body, 300))
	}
	ev := page.Events[0]
	if ev.ID != envelope.EventID(corr, 0, "OrderPlaced") || ev.Type != "OrderPlaced" || ev.Data.OrderID != cmdID {
		return fmt.Errorf("GET /events?correlationId=%s: unexpected event %s", corr, trunc(body, 300))
	}
	return nil
}
