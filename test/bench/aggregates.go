package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/localstore"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/settings"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The aggregates stage (`-only aggregates`; not part of `make bench`)
// measures what each aggregate costs the NATS server's memory under the
// two subject layouts of the event log: the aggregate id in the subject
// (contract version 1: a subject per aggregate) and its shard there with
// the id in a header (version 2). For each, a fresh in-process nats-server
// (file storage, as agentbus embeds it) stores n OrderPlaced events, each
// of a new order, on a stream of the event log's subjects; once the
// server's block caches have expired, the live heap of the process (the
// server's, after two collections) less the same before gives the bytes
// each aggregate keeps. The stream keeps no duplicate window, so that ids
// do not count. For the sharded log, the stage then builds agentbus's
// aggregate index (projection.Aggregates on Pebble, memory.index's
// default) from the log, times it, and times lookups of aggregates
// written and never written.

type aggregatesOptions struct {
	n       int // events (aggregates) stored in each layout
	lookups int // lookups of each kind in the index
}

// aggregatesLayouts are the subject layouts measured, in order.
var aggregatesLayouts = []string{"id", "shard"}

type aggregatesResult struct {
	layout     string
	subjects   uint64
	perAgg     float64 // bytes of live heap per aggregate
	heapMiB    float64 // live heap held for the n aggregates
	storeTime  time.Duration
	indexTime  time.Duration
	hit, miss  []time.Duration
	indexBytes int64
}

func aggregatesStage(o aggregatesOptions, rep *report) error {
	if o.n < 1000 {
		return fmt.Errorf("aggregates: -aggregates-n must be at least 1000")
	}
	fmt.Printf("12. Aggregates: %d OrderPlaced events, each of a new order, stored on an in-process nats-server (file storage) with the aggregate id\n", o.n)
	fmt.Printf("    in the subject (contract version 1) and then, on a fresh server, with the aggregate's shard there (version 2); live heap once the block caches expired;\n")
	fmt.Printf("    then agentbus's aggregate index built from the sharded log, and %d lookups each of aggregates written and never written\n", o.lookups)
	fmt.Printf("    %s  loadavg %s\n", time.Now().UTC().Format(time.RFC3339), loadAvg())
	for _, layout := range aggregatesLayouts {
		r, err := aggregatesRun(o, layout)
		if err != nil {
			return err
		}
		fmt.Printf("   %-5s  subjects %9d  live heap for the aggregates %8.1f MiB = %6.1f B per aggregate  stored in %s\n",
			layout, r.subjects, r.heapMiB, r.perAgg, r.storeTime.Round(100*time.Millisecond))
		rep.add("aggregates."+layout+".bytes_per_aggregate", r.perAgg, "B")
		rep.add("aggregates."+layout+".subjects", float64(r.subjects), "")
		rep.add("aggregates."+layout+".heap_mib", r.heapMiB, "MiB")
		if r.indexTime > 0 {
			q := func(d []time.Duration) []time.Duration { return percentiles(d, 0.5, 0.99) }
			h, m := q(r.hit), q(r.miss)
			fmt.Printf("          aggregate index: built from the log in %s (%.0f events/s), %.0f MiB on disk; lookup of a written aggregate p50 %.1f µs p99 %.1f µs, of one never written p50 %.1f µs p99 %.1f µs\n",
				r.indexTime.Round(100*time.Millisecond), float64(o.n)/r.indexTime.Seconds(), float64(r.indexBytes)/(1<<20),
				us(h[0]), us(h[1]), us(m[0]), us(m[1]))
			rep.add("aggregates.index.build_seconds", r.indexTime.Seconds(), "s")
			rep.add("aggregates.index.lookup.p99", us(h[1]), "µs")
			rep.add("aggregates.index.miss.p99", us(m[1]), "µs")
		}
	}
	fmt.Println()
	return nil
}

func aggregatesRun(o aggregatesOptions, layout string) (aggregatesResult, error) {
	res := aggregatesResult{layout: layout}
	dir, err := os.MkdirTemp("", "agentbus-bench-aggregates-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	runtime.GC()
	debug.FreeOSMemory()
	base := liveHeap()
	ns, err := natsserver.NewServer(&natsserver.Options{
		ServerName: "bench-aggregates", JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoSigs: true, NoLog: true,
		Host: "127.0.0.1", Port: -1, JetStreamMaxMemory: 256 << 20,
	})
	if err != nil {
		return res, err
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(30 * time.Second) {
		return res, fmt.Errorf("aggregates: nats-server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return res, err
	}
	defer nc.Close()
	ctx := context.Background()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return res, err
	}
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "AGENTBUS_EVENTS", Subjects: []string{"agentbus.evt.>"},
		Storage: jetstream.FileStorage, Duplicates: 0, AllowDirect: true, DenyDelete: true, DenyPurge: true})
	if err != nil {
		return res, err
	}
	subj := bus.Subjects{Prefix: "agentbus"}
	body := []byte(`{"specversion":"1.0","id":"00000000-0000-5000-8000-000000000000","source":"agentbus","type":"OrderPlaced","datacontenttype":"application/json","time":"2026-11-29T00:00:00Z","data":{"orderId":"o","customer":"ada"}}`)
	began := time.Now()
	for i := range o.n {
		id := aggregateName(i)
		m := nats.NewMsg("")
		if layout == "id" {
			m.Subject = "agentbus.evt.default.order." + id + ".OrderPlaced"
		} else {
			m.Subject = subj.Event(bus.RootEvents, "default", "order", id, "OrderPlaced")
			m.Header.Set(bus.HeaderAggregateID, id)
		}
		m.Data = body
		if _, err := js.PublishMsgAsync(m); err != nil {
			return res, fmt.Errorf("aggregates: publish %d: %w", i, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		return res, fmt.Errorf("aggregates: the publishes were not acknowledged within 5 minutes")
	}
	res.storeTime = time.Since(began)
	info, err := st.Info(ctx)
	if err != nil {
		return res, err
	}
	if info.State.Msgs != uint64(o.n) {
		return res, fmt.Errorf("aggregates: the stream holds %d messages, want %d", info.State.Msgs, o.n)
	}
	res.subjects = info.State.NumSubjects
	time.Sleep(blockCacheExpiry)
	held := liveHeap() - base
	res.heapMiB = float64(held) / (1 << 20)
	res.perAgg = float64(held) / float64(o.n)
	if layout != "shard" {
		return res, nil
	}
	return res, aggregatesIndex(o, dir, ns.ClientURL(), &res)
}

// aggregateName is the id of the i-th aggregate the stage writes.
func aggregateName(i int) string { return "order-" + strconv.Itoa(i) }

// aggregatesIndex builds the aggregate index of the log js holds and
// times lookups in it.
func aggregatesIndex(o aggregatesOptions, dir, url string, res *aggregatesResult) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	disk, _, err := localstore.Open(filepath.Join(dir, "index"), settings.Default().Memory.IndexBytes(), log)
	if err != nil {
		return err
	}
	defer disk.Close()
	conn, err := natsjs.Connect(ctx, natsjs.Config{URL: url}, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	events, err := conn.Log(ctx, "AGENTBUS_EVENTS")
	if err != nil {
		return err
	}
	subj := bus.Subjects{Prefix: "agentbus"}
	idx := projection.NewAggregates(disk, subj, log)
	began := time.Now()
	if err := idx.Start(ctx, bus.LogTail(events, subj)); err != nil {
		return err
	}
	if err := idx.WaitThrough(ctx, uint64(o.n)); err != nil {
		return err
	}
	res.indexTime = time.Since(began)
	res.indexBytes = dirBytes(filepath.Join(dir, "index"))
	rng := rand.New(rand.NewPCG(7, 11))
	for range o.lookups {
		i := rng.IntN(o.n)
		t0 := time.Now()
		seq, err := idx.Last("default", "order", aggregateName(i))
		res.hit = append(res.hit, time.Since(t0))
		if err != nil || seq != uint64(i+1) {
			return fmt.Errorf("aggregates: the index has %s at %d (%v), want %d", aggregateName(i), seq, err, i+1)
		}
		t0 = time.Now()
		seq, err = idx.Last("default", "order", "never-"+strconv.Itoa(i))
		res.miss = append(res.miss, time.Since(t0))
		if err != nil || seq != 0 {
			return fmt.Errorf("aggregates: the index has an aggregate never written at %d (%v)", seq, err)
		}
	}
	slices.Sort(res.hit)
	slices.Sort(res.miss)
	return nil
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
