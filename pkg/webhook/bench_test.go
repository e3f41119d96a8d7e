//go:build unix

package webhook_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/webhook"
	"github.com/agentbus/agentbus/pkg/webhook/send"
)

// BenchmarkDeliveries measures delivery as the events are appended one by
// one (timed from the first append to the last delivery), after an event
// of another type per subscription: 10 subscriptions, 2,000 events each,
// to one loopback receiver that counts and answers 204, beside a bare signed
// POST loop (10 senders, 1 s) to the same receiver in the same run. It
// reports deliveries/s, the bare loop's rate and their ratio, and the
// process's CPU time per delivery and per bare POST (the receiver and the
// embedded nats-server included), which moves less than rates on a busy
// machine:
//
//	go test ./pkg/webhook -run '^$' -bench Deliveries -benchtime 1x -count 3
func BenchmarkDeliveries(b *testing.B) {
	benchmarkDeliveries(b, 10, 2000)
}

// BenchmarkDeliveriesWide is BenchmarkDeliveries with 1,000 subscriptions
// and 20 events.
func BenchmarkDeliveriesWide(b *testing.B) {
	benchmarkDeliveries(b, 1000, 20)
}

func benchmarkDeliveries(b *testing.B, subs, events int) {
	var got atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(rcv.Close)
	for range b.N {
		b.StopTimer()
		e := newEnv(b)
		// As pkg/egress's client: a connection kept for each worker.
		e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		bareCPU, bareFrom := cpuTime(), got.Load()
		bare := bareLoop(rcv.URL+"/bare", &got, subs, time.Second)
		bareN := float64(got.Load() - bareFrom)
		bareCPU = cpuTime() - bareCPU
		list := make([]webhook.Subscription, subs)
		for i := range list {
			list[i] = webhook.Subscription{Tenant: "default", ID: "s" + strconv.Itoa(i), URL: rcv.URL + "/hook",
				Types: []string{"OrderPlaced"}, Active: true}
		}
		e.subs.set(list...)
		stop := e.dispatcher(webhook.Config{Scan: 2 * time.Second, Lease: 15 * time.Second})
		// An event of another type per subscription first, as creating
		// them makes in agentbus.
		e.publish("default", "SubscriptionCreated", subs)
		time.Sleep(200*time.Millisecond + time.Duration(subs)*time.Millisecond) // its first scan takes the leases
		before := got.Load()
		b.StartTimer()
		cpu := cpuTime()
		start := time.Now()
		e.publish("default", "OrderPlaced", events)
		for got.Load()-before < int64(subs*events) {
			if time.Since(start) > time.Minute {
				b.Fatalf("%d of %d deliveries after a minute", got.Load()-before, subs*events)
			}
			time.Sleep(time.Millisecond)
		}
		elapsed := time.Since(start)
		cpu = cpuTime() - cpu
		b.StopTimer()
		stop()
		rate := float64(subs*events) / elapsed.Seconds()
		b.ReportMetric(rate, "deliveries/s")
		b.ReportMetric(bare, "bare/s")
		b.ReportMetric(rate/bare, "ratio")
		b.ReportMetric(float64(cpu.Microseconds())/float64(subs*events), "cpu-µs/delivery")
		b.ReportMetric(float64(bareCPU.Microseconds())/bareN, "cpu-µs/bare")
	}
}

// cpuTime is the CPU time the process used so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bareLoop posts signed bodies to url from senders goroutines for d and
// returns the rate.
func bareLoop(url string, got *atomic.Int64, senders int, d time.Duration) float64 {
	key := []byte("bench-signing-key")
	body := bytes.Repeat([]byte("x"), 300)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: senders}}
	defer client.CloseIdleConnections()
	before := got.Load()
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline); n++ {
				id := "bare-" + strconv.Itoa(i) + "-" + strconv.Itoa(n)
				now := time.Now()
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
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
	return float64(got.Load()-before) / time.Since(start).Seconds()
}

// BenchmarkIdleLeases measures what a replica spends holding 1,000
// subscriptions' leases with nothing to deliver (the defaults' scan and
// lease): the process's CPU time per second over 10 s, once every lease
// is taken.
func BenchmarkIdleLeases(b *testing.B) {
	const subs = 1000
	for range b.N {
		b.StopTimer()
		e := newEnv(b)
		list := make([]webhook.Subscription, subs)
		for i := range list {
			list[i] = webhook.Subscription{Tenant: "default", ID: "s" + strconv.Itoa(i), URL: e.rcv.srv.URL, Active: true}
		}
		e.subs.set(list...)
		stop := e.dispatcher(webhook.Config{Scan: 2 * time.Second, Lease: 15 * time.Second})
		time.Sleep(3 * time.Second) // the first scan takes the leases
		b.StartTimer()
		cpu, start := cpuTime(), time.Now()
		time.Sleep(10 * time.Second)
		cpu = cpuTime() - cpu
		b.StopTimer()
		stop()
		b.ReportMetric(float64(cpu.Microseconds())/1000/time.Since(start).Seconds(), "cpu-ms/s")
	}
}
