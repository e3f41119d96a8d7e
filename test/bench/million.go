package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// lookupStats are sequential GET /events?correlationId= timings.
type lookupStats struct {
	P50, P99, Max  time.Duration
	Errors         int
	FirstErr       string
	StoreMsgs      uint64 // events stored when measured
	StoreMegabytes float64
}

type millionResult struct {
	Seeded     int
	Fill       time.Duration
	FillRate   float64
	SeedErrors int64
	CatchUp    time.Duration // the history done with the seed after the fill ended
	Empty      lookupStats   // store holding only the probe commands' events
	Full       lookupStats   // new commands, after the seed
	FullOld    lookupStats   // the first probe commands, now behind the seed
	Logs       string
	Skipped    string
	TotalTime  time.Duration
}

// runMillion measures correlation lookups on an (almost) empty event stream,
// then publishes n raw events into AGENTBUS_EVENTS and measures again.
func runMillion(verbose bool, n, window, lookups int, limit time.Duration) (millionResult, error) {
	t0 := time.Now()
	var res millionResult
	ab, err := startAgentbus(verbose)
	if err != nil {
		return res, err
	}
	defer ab.Stop()
	ctx := context.Background()
	names := natsjs.NamesFor("agentbus")
	client := newClient(16)
	defer client.CloseIdleConnections()

	old, err := submitAndWait(ab, client, "m0", lookups)
	if err != nil {
		return res, fmt.Errorf("probe commands on the empty store: %w", err)
	}
	res.Empty = lookupRun(ab, client, old)

	// Seed: PublishAsync with a bounded window of unacknowledged messages.
	var seedErrs atomic.Int64
	js, err := jetstream.New(ab.Conn.NC, jetstream.WithPublishAsyncMaxPending(window),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { seedErrs.Add(1) }))
	if err != nil {
		return res, err
	}
	subject := "agentbus.evt.default._._.Seed"
	fillStart := time.Now()
	deadline := fillStart.Add(limit)
	buf := make([]byte, 0, 256)
	for i := range n {
		if i%10000 == 0 && time.Now().After(deadline) {
			res.Skipped = fmt.Sprintf("fill stopped after %d of %d events: over the %s limit", i, n, limit)
			n = i
			break
		}
		buf = buf[:0]
		buf = append(buf, `{"specversion":"1.0","id":"seed-`...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		buf = append(buf, `","source":"agentbus-bench","type":"Seed","datacontenttype":"application/json","time":"2026-01-02T15:04:05Z","data":{"n":`...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		buf = append(buf, `}}`...)
		data := append([]byte(nil), buf...)
		for {
			_, err := js.PublishAsync(subject, data, jetstream.WithStallWait(5*time.Second))
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return res, fmt.Errorf("seed publish %d: %w", i, err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		return res, errors.New("seed: acks still pending after 60s")
	}
	res.Fill = time.Since(fillStart)
	res.Seeded = n
	res.FillRate = float64(n) / res.Fill.Seconds()
	res.SeedErrors = seedErrs.Load()

	// The history (the correlation index on the replica's disk) reads
	// every event, seed included, in order; new commands' events queue
	// behind it. Wait until the disk holds it up to the stream's last
	// event.
	cu := time.Now()
	st, err := ab.Conn.JS.Stream(ctx, names.Events)
	if err != nil {
		return res, err
	}
	last := st.CachedInfo().State.LastSeq
	for {
		_, held := ab.History.Through()
		if held >= last {
			break
		}
		if time.Since(cu) > 120*time.Second {
			return res, fmt.Errorf("the history still %d events behind after 120s", last-held)
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.CatchUp = time.Since(cu)

	fresh, err := submitAndWait(ab, client, "m1", lookups)
	if err != nil {
		return res, fmt.Errorf("probe commands on the full store: %w", err)
	}
	res.Full = lookupRun(ab, client, fresh)
	res.FullOld = lookupRun(ab, client, old)
	res.Logs = ab.logs()
	res.TotalTime = time.Since(t0)
	return res, nil
}

type probe struct{ corr, cmdID string }

// submitAndWait submits n PlaceOrder commands (16 at a time) and waits until
// every one is visible.
func submitAndWait(ab *abServer, c *http.Client, tag string, n int) ([]probe, error) {
	ps := make([]probe, n)
	corrs := make([]string, n)
	for i := range ps {
		corrs[i] = commandCorrelation(tag, i)
		ps[i] = probe{corr: corrs[i], cmdID: fmt.Sprintf("%s-%d", tag, i)}
	}
	tr, err := newTracker(ab, corrs, nil)
	if err != nil {
		return nil, err
	}
	defer tr.close()
	if failed, first := postAll(c, ab.URL+"/commands", n, 16, func(i int) []byte { return commandBody(tag, i) }); failed > 0 {
		return nil, fmt.Errorf("POST /commands: %d of %d failed, first: %s", failed, n, first)
	}
	if !tr.wait(60 * time.Second) {
		return nil, fmt.Errorf("%d of %d commands not visible after 60s", tr.left.Load(), n)
	}
	return ps, nil
}

// lookupRun times one GET /events?correlationId= per probe, one after the
// other, checking each answer.
func lookupRun(ab *abServer, c *http.Client, ps []probe) lookupStats {
	var st lookupStats
	if info, err := ab.Conn.JS.Stream(context.Background(), natsjs.NamesFor("agentbus").Events); err == nil {
		st.StoreMsgs = info.CachedInfo().State.Msgs
		st.StoreMegabytes = float64(info.CachedInfo().State.Bytes) / (1 << 20)
	}
	_ = verifyLookup(c, ab.URL, ps[0].corr, ps[0].cmdID) // warm the connection
	lat := make([]time.Duration, 0, len(ps))
	for _, p := range ps {
		t := time.Now()
		status, body, err := get(c, ab.URL+"/events?correlationId="+p.corr)
		d := time.Since(t)
		if err == nil {
			err = checkLookup(p.corr, p.cmdID, status, body)
		}
		if err != nil {
			st.Errors++
			if st.FirstErr == "" {
				st.FirstErr = err.Error()
			}
			continue
		}
		lat = append(lat, d)
	}
	q := percentiles(lat, 0.5, 0.99, 1)
	st.P50, st.P99, st.Max = q[0], q[1], q[2]
	return st
}
