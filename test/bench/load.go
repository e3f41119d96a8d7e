package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
)

// bodies is a pool of pre-marshalled, distinct PlaceOrder envelopes. Every
// server under load gets a fresh store, so one pool serves every run: a run
// takes bodies from index 0 again.
type bodies struct {
	all  [][]byte
	next atomic.Int64
	wrap atomic.Int64 // takes past the end (ids then repeat: must stay 0)
}

const benchSource = "agentbus-bench"

// commandBody returns a valid place-order/1.0 envelope with id and orderId
// derived from tag and i.
func commandBody(tag string, i int) []byte {
	return fmt.Appendf(nil, `{"specversion":"1.0","id":"%s-%d","source":"%s","type":"PlaceOrder",`+
		`"datacontenttype":"application/json","dataschema":"place-order/1.0","time":"2026-01-02T15:04:05Z",`+
		`"data":{"orderId":"%s-%d","customer":"ada","items":[{"sku":"A-1","quantity":2}]}}`, tag, i, benchSource, tag, i)
}

// commandCorrelation is the correlation id agentbus derives for commandBody(tag, i).
func commandCorrelation(tag string, i int) string {
	return envelope.CorrelationID("default", benchSource, fmt.Sprintf("%s-%d", tag, i))
}

func newBodies(tag string, n int) *bodies {
	b := &bodies{all: make([][]byte, n)}
	for i := range b.all {
		b.all[i] = commandBody(tag, i)
	}
	return b
}

func (b *bodies) reset() { b.next.Store(0); b.wrap.Store(0) }

func (b *bodies) take() []byte {
	i := b.next.Add(1) - 1
	if i >= int64(len(b.all)) {
		b.wrap.Add(1)
	}
	return b.all[i%int64(len(b.all))]
}

// newClient is a keep-alive HTTP client for loopback load.
func newClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        conns * 2,
			MaxIdleConnsPerHost: conns,
			MaxConnsPerHost:     conns,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
}

// post sends one JSON body, with extra headers given as name, value pairs,
// and drains the response so the connection is reused. It returns the
// status and body.
func post(c *http.Client, url string, body []byte, hdr ...string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	return res.StatusCode, b, err
}

// postAll POSTs body(i) for i in [0, n) to url, workers at a time, and
// returns how many did not answer 202 and the first of those.
func postAll(c *http.Client, url string, n, workers int, body func(i int) []byte) (failed int64, firstErr string) {
	var next, errs atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				status, b, err := post(c, url, body(i))
				if err != nil || status != http.StatusAccepted {
					errs.Add(1)
					first.CompareAndSwap(nil, fmt.Sprintf("%d %v %s", status, err, trunc(b, 200)))
				}
			}
		}()
	}
	wg.Wait()
	if v, ok := first.Load().(string); ok {
		firstErr = v
	}
	return errs.Load(), firstErr
}

func get(c *http.Client, url string) (int, []byte, error) {
	res, err := c.Get(url)
	if err != nil {
		return 0, nil, err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	return res.StatusCode, b, err
}

// loadResult is one closed-loop run.
type loadResult struct {
	Label     string
	Errors    int // transport errors or non-202 answers inside the window
	FirstErr  string
	RPS       float64
	P50, P99  time.Duration
	Max       time.Duration
	Wrapped   int64
	Processed string // agentbus only: how far the pipeline got, informational
	CPU       cpuUse // during the measured window
}

// closedLoop runs conns workers, each sending POST url back to back with the
// next body (and the extra headers hdr, name, value pairs), for
// warmup+dur; requests completing inside the last dur count.
func closedLoop(label, url string, src *bodies, conns int, warmup, dur time.Duration, hdr ...string) loadResult {
	src.reset()
	client := newClient(conns)
	defer client.CloseIdleConnections()
	start := time.Now()
	mStart, mEnd := start.Add(warmup), start.Add(warmup+dur)
	type acc struct {
		lat      []time.Duration
		errs     int
		firstErr string
	}
	accs := make([]*acc, conns)
	cpuDone := make(chan cpuUse, 1)
	go func() {
		time.Sleep(time.Until(mStart))
		a := sampleCPU()
		time.Sleep(time.Until(mEnd))
		cpuDone <- cpuBetween(a, sampleCPU(), runtime.NumCPU())
	}()
	var wg sync.WaitGroup
	for w := range conns {
		a := &acc{lat: make([]time.Duration, 0, 1<<16)}
		accs[w] = a
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				if !t0.Before(mEnd) {
					return
				}
				status, body, err := post(client, url, src.take(), hdr...)
				t1 := time.Now()
				if t1.Before(mStart) || !t1.Before(mEnd) {
					continue
				}
				if err != nil || status != http.StatusAccepted {
					a.errs++
					if a.firstErr == "" {
						if err != nil {
							a.firstErr = err.Error()
						} else {
							a.firstErr = fmt.Sprintf("%d %s", status, trunc(body, 200))
						}
					}
					continue
				}
				a.lat = append(a.lat, t1.Sub(t0))
			}
		}()
	}
	wg.Wait()
	r := loadResult{Label: label, Wrapped: src.wrap.Load(), CPU: <-cpuDone}
	var all []time.Duration
	for _, a := range accs {
		all = append(all, a.lat...)
		r.Errors += a.errs
		if r.FirstErr == "" {
			r.FirstErr = a.firstErr
		}
	}
	r.RPS = float64(len(all)) / dur.Seconds()
	p := percentiles(all, 0.50, 0.99, 1)
	r.P50, r.P99, r.Max = p[0], p[1], p[2]
	return r
}

// percentiles sorts d in place and returns the nearest-rank percentiles qs
// (0 < q <= 1); zeros when d is empty.
func percentiles(d []time.Duration, qs ...float64) []time.Duration {
	out := make([]time.Duration, len(qs))
	if len(d) == 0 {
		return out
	}
	slices.Sort(d)
	for i, q := range qs {
		k := int(float64(len(d))*q+0.999999) - 1
		out[i] = d[min(max(k, 0), len(d)-1)]
	}
	return out
}

func trunc(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fms formats a latency in ms, or "never" for one that did not happen in time.
func fms(d time.Duration) string {
	if d == never {
		return "never"
	}
	return fmt.Sprintf("%.2f", ms(d))
}
