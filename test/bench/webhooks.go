package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/pkg/webhook/send"
)

// webhookTargets are the targets for webhook delivery on 2 cores.
const (
	webhookRateTarget  = 2000 // deliveries/s across 10 subscriptions
	webhookRatioTarget = 0.5  // of the bare signed POST loop
	webhookP99Target   = 50 * time.Millisecond
)

// whReceiver is the loopback receiver of the webhook stage: it counts
// deliveries and, when timing, records each one's delay from the event's
// time (the envelope's "time", stamped when the event was published).
type whReceiver struct {
	srv    *http.Server
	url    string
	count  atomic.Int64
	timing atomic.Bool
	mu     sync.Mutex
	delays []time.Duration
}

func startReceiver() (*whReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &whReceiver{url: "http://" + ln.Addr().String() + "/hook"}
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		arrived := time.Now()
		r.count.Add(1)
		if r.timing.Load() {
			var env struct {
				Time time.Time `json:"time"`
			}
			if json.Unmarshal(body, &env) == nil && !env.Time.IsZero() {
				r.mu.Lock()
				r.delays = append(r.delays, arrived.Sub(env.Time))
				r.mu.Unlock()
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// whResult is one webhook round.
type whResult struct {
	Subs       int
	Deliveries int64
	Elapsed    time.Duration
	Accepted   time.Duration // until the last command was accepted
	Rate       float64
	// ReplayRate is the deliveries per second of the same events delivered
	// again from the log (every subscription replayed from its start),
	// from the first of them to the last: delivery alone, without commands
	// being taken and processed beside it.
	ReplayRate float64
	P50, P99   time.Duration
	Goroutines int
	HeapMiB    float64
}

// webhookStage measures webhook delivery beside a bare signed POST loop to
// the same loopback receiver: deliveries per second across 10
// subscriptions, event → delivered latency at 500 events/s, and a round
// with 1,000 subscriptions.
func webhookStage(o options, rep *report) error {
	fmt.Println("7. Webhook delivery: 10 subscriptions to one loopback receiver, beside a bare signed POST loop to it;")
	fmt.Println("   event → delivered at 500 events/s; a round with 1,000 subscriptions")
	rcv, err := startReceiver()
	if err != nil {
		return err
	}
	defer rcv.srv.Close()
	runtime.GC()
	waitQuiet()
	bare := bareSignedLoop(rcv, 10, 3*time.Second)
	fmt.Printf("   bare signed POST loop, 10 senders: %.0f deliveries/s\n", bare)

	runtime.GC()
	waitQuiet()
	thr, err := webhookRound(rcv, 10, 2000, 0, o.profWebhooks, true)
	if err != nil {
		return err
	}
	fmt.Printf("   agentbus, 10 subscriptions, 2,000 events: %d deliveries in %s: %.0f deliveries/s (%.2f× the bare loop; commands accepted in %s)\n",
		thr.Deliveries, thr.Elapsed.Round(time.Millisecond), thr.Rate, thr.Rate/bare, thr.Accepted.Round(time.Millisecond))
	fmt.Printf("   the same 20,000 deliveries again, replayed from the log (delivery alone): %.0f deliveries/s (%.2f× the bare loop)\n",
		thr.ReplayRate, thr.ReplayRate/bare)

	runtime.GC()
	waitQuiet()
	lat, err := webhookRound(rcv, 10, 2500, 500, "", false)
	if err != nil {
		return err
	}
	fmt.Printf("   agentbus, 10 subscriptions at 500 events/s for 5 s: event → delivered p50 %.1f ms, p99 %.1f ms\n", ms(lat.P50), ms(lat.P99))

	runtime.GC()
	waitQuiet()
	wide, err := webhookRound(rcv, 1000, 20, 0, "", false)
	if err != nil {
		return err
	}
	fmt.Printf("   agentbus, 1,000 subscriptions, 20 events: %d deliveries in %s: %.0f deliveries/s; %d goroutines, %.0f MiB heap in use after\n\n",
		wide.Deliveries, wide.Elapsed.Round(time.Millisecond), wide.Rate, wide.Goroutines, wide.HeapMiB)

	rep.add("webhooks.bare_rate", bare, "deliveries/s")
	rep.add("webhooks.rate", thr.Rate, "deliveries/s")
	rep.add("webhooks.replay_rate", thr.ReplayRate, "deliveries/s")
	rep.add("webhooks.p50", ms(lat.P50), "ms")
	rep.add("webhooks.p99", ms(lat.P99), "ms")
	rep.add("webhooks.rate_1000_subscriptions", wide.Rate, "deliveries/s")
	rep.row("webhook deliveries/s, 10 subscriptions", fmt.Sprintf("%.0f", thr.Rate), fmt.Sprintf(">= %d", webhookRateTarget), verdict(thr.Rate >= webhookRateTarget))
	// The bare loop only delivers: the ratio that compares like with like
	// is delivery alone (the replayed round); with the commands' ingest and
	// processing on the same cores beside it, it is shown too.
	rep.row("  delivery alone (replayed), ratio to a bare signed POST loop", fmt.Sprintf("%.2f", thr.ReplayRate/bare), fmt.Sprintf(">= %.1f", webhookRatioTarget), verdict(thr.ReplayRate/bare >= webhookRatioTarget))
	rep.row("  with 2,000 commands taken beside it, ratio", fmt.Sprintf("%.2f", thr.Rate/bare), "", "")
	rep.row("webhook event → delivered p99 at 500/s (ms)", fmt.Sprintf("%.1f", ms(lat.P99)), fmt.Sprintf("<= %.0f", ms(webhookP99Target)), verdict(lat.P99 <= webhookP99Target))
	rep.row("webhook deliveries/s, 1,000 subscriptions", fmt.Sprintf("%.0f", wide.Rate), "", "")
	return nil
}

// bareSignedLoop posts signed envelopes to the receiver from senders
// goroutines for d, as a delivery does without agentbus around it, and
// returns the rate.
func bareSignedLoop(rcv *whReceiver, senders int, d time.Duration) float64 {
	key := []byte("bench-signing-key-0123456789abcd")
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: senders}}
	body := commandBody("bare", 0)
	before := rcv.count.Load()
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline); n++ {
				id := "bare-" + strconv.Itoa(i) + "-" + strconv.Itoa(n)
				now := time.Now()
				req, _ := http.NewRequest(http.MethodPost, rcv.url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("webhook-id", id)
				req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
				req.Header.Set("webhook-signature", send.Signature([][]byte{key}, id, now, body))
				if res, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	return float64(rcv.count.Load()-before) / time.Since(start).Seconds()
}

// webhookRound starts a fresh agentbus, creates subs subscriptions to the
// receiver (OrderPlaced only), submits events commands (each one
// OrderPlaced event) — at rate per second, or as fast as accepted when 0 —
// and waits until every subscription has every event. With prof set, the
// round's sending and delivering are CPU-profiled into that file. With
// replay (and rate 0) it then replays every subscription from the start
// and times those deliveries too (ReplayRate).
func webhookRound(rcv *whReceiver, subs, events int, rate int, prof string, replay bool) (whResult, error) {
	res := whResult{Subs: subs}
	ab, err := startAgentbus(false, func(c *settings.Config) {
		c.Webhooks.AllowPrivate = true
		c.Quotas.Subscriptions = max(subs, c.Quotas.Subscriptions)
	})
	if err != nil {
		return res, err
	}
	defer ab.Stop()
	client := newClient(64)
	defer client.CloseIdleConnections()
	ids := make([]string, 0, subs)
	for i := range subs {
		b, _ := json.Marshal(map[string]any{"webhook": map[string]any{"url": rcv.url}, "filter": map[string]any{"types": []string{"OrderPlaced"}}})
		status, body, err := post(client, ab.URL+"/subscriptions", b)
		if err != nil || status != http.StatusCreated {
			return res, fmt.Errorf("subscription %d: %d %v %s", i, status, err, trunc(body, 200))
		}
		var created struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &created); err != nil || created.ID == "" {
			return res, fmt.Errorf("subscription %d: no id in %s", i, trunc(body, 200))
		}
		ids = append(ids, created.ID)
	}
	time.Sleep(2500 * time.Millisecond) // every replica's scan (2 s) takes its leases
	rcv.mu.Lock()
	rcv.delays = rcv.delays[:0]
	rcv.mu.Unlock()
	rcv.timing.Store(rate > 0)
	defer rcv.timing.Store(false)
	before := rcv.count.Load()
	want := int64(subs * events)
	tag := fmt.Sprintf("wh%d-%d-%d", subs, events, time.Now().UnixNano())
	stopProfile := func() {}
	if prof != "" {
		if stop := startProfile(prof, 0); stop != nil {
			stopProfile = stop
		}
	}
	start := time.Now()
	if rate == 0 {
		if failed, first := postAll(client, ab.URL+"/commands", events, 32, func(i int) []byte { return commandBody(tag, i) }); failed > 0 {
			return res, fmt.Errorf("%d commands failed: %s", failed, first)
		}
	} else {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		var wg sync.WaitGroup
		var failed atomic.Int64
		var first atomic.Value
		sem := make(chan struct{}, 64)
		for i := range events {
			<-tick.C
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				status, b, err := post(client, ab.URL+"/commands", commandBody(tag, i))
				if err != nil || status != http.StatusAccepted {
					failed.Add(1)
					first.CompareAndSwap(nil, fmt.Sprintf("%d %v %s", status, err, trunc(b, 200)))
				}
			}()
		}
		tick.Stop()
		wg.Wait()
		if n := failed.Load(); n > 0 {
			return res, fmt.Errorf("%d commands failed: %s", n, first.Load())
		}
	}
	res.Accepted = time.Since(start)
	deadline := time.Now().Add(120 * time.Second)
	for rcv.count.Load()-before < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	res.Elapsed = time.Since(start)
	stopProfile()
	res.Deliveries = rcv.count.Load() - before
	res.Rate = float64(res.Deliveries) / res.Elapsed.Seconds()
	if res.Deliveries < want {
		return res, fmt.Errorf("only %d of %d deliveries after 120 s", res.Deliveries, want)
	}
	rcv.mu.Lock()
	if len(rcv.delays) > 0 {
		p := percentiles(rcv.delays, 0.50, 0.99)
		res.P50, res.P99 = p[0], p[1]
	}
	rcv.mu.Unlock()
	if replay && rate == 0 {
		// The same events again, from the log: delivery alone.
		rcv.timing.Store(false)
		before = rcv.count.Load()
		start = time.Now()
		for _, id := range ids {
			if status, body, err := post(client, ab.URL+"/subscriptions/"+id+"/replay", []byte(`{"after":0}`)); err != nil || status != http.StatusAccepted {
				return res, fmt.Errorf("replay %s: %d %v %s", id, status, err, trunc(body, 200))
			}
		}
		// Timed from the first delivery again: a worker sees its cursor
		// moved at its next scan (2 s), which is not delivery.
		deadline = time.Now().Add(120 * time.Second)
		for rcv.count.Load() == before && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		start = time.Now()
		first := rcv.count.Load() - before
		for rcv.count.Load()-before < want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := rcv.count.Load() - before; got < want {
			return res, fmt.Errorf("replay: only %d of %d deliveries after 120 s", got, want)
		}
		res.ReplayRate = float64(want-first) / time.Since(start).Seconds()
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	res.Goroutines, res.HeapMiB = runtime.NumGoroutine(), float64(m.HeapInuse)/(1<<20)
	return res, nil
}
