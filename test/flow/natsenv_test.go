// The tests of this package run the rooms of the command → event flow
// (ops, process, project) together on a real embedded nats-server, wired
// as pkg/server wires them, with the tests in control of deliveries.
package flow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/config"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/execute"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/localstore"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/ops"
	opcommand "github.com/agentbus/agentbus/pkg/ops/command"
	"github.com/agentbus/agentbus/pkg/ops/read"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/query"
	"github.com/agentbus/agentbus/pkg/reconcile"
	"github.com/agentbus/agentbus/pkg/settle"
	"github.com/agentbus/agentbus/pkg/webhook"
	"github.com/agentbus/agentbus/pkg/webhook/record"
	"github.com/agentbus/agentbus/streams"
)

// natsEnv is one agentbus node on a real embedded nats-server (in-process,
// temp store) with the shipped stream files applied and the receipt
// projections running. The processor consumer is not run: tests hand
// deliveries to ProcessCommand themselves, so they control redelivery.
type natsEnv struct {
	t      *testing.T
	conn   *natsjs.Conn
	app    *node
	cmds   *natsjs.Log
	events *natsjs.Log
	names  natsjs.Names
	stores envStores
	cat    *catalog.Catalog
}

// envStores are the ports every node of an env shares.
type envStores struct {
	commands, events, synthetic      *natsjs.Log
	commandConsumers, eventConsumers bus.ConsumerAdmin
	webhooks                         *webhook.Control
}

// node is one agentbus process's rooms on the env's stores, wired as
// pkg/server wires them, with the handler names tests use.
type node struct {
	st       envStores
	cat      *catalog.Catalog
	log      *slog.Logger
	proc     *execute.Processor
	receipts *projection.Receipts
	// history holds back the events it is handed while paused
	// (pauseHistory).
	history *gatedTail
	regs    *projection.Registries
	agents  *reconcile.AgentConsumers
	pending *projection.Pending
	handoff *execute.Handoff
	in      *ingest.Ingest
	ops     *ops.Surface
	// observed hears what its processor reports.
	observed *observer
	// aggs is its aggregate index, which holds back the events it is
	// handed while aggsTail is paused.
	aggs     *projection.Aggregates
	aggsTail *gatedTail
}

// observer counts what a processor reports (execute.Observer).
type observer struct{ processed, conflicts atomic.Int64 }

func (o *observer) Processed(string, time.Duration) { o.processed.Add(1) }
func (o *observer) Conflicted()                     { o.conflicts.Add(1) }

// newNode returns a node on st with disk as its replica's own disk, its
// aggregate index following the event log until t ends.
func newNode(t *testing.T, st envStores, disk bus.Disk, cat *catalog.Catalog, log *slog.Logger) *node {
	subj := bus.Subjects{Prefix: "agentbus"}
	n := &node{st: st, cat: cat, log: log, observed: &observer{}}
	aggs := projection.NewAggregates(disk, subj, log)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the disk closes: cleanups run last first
	n.aggs, n.aggsTail = aggs, &gatedTail{Tail: bus.LogTail(st.events, subj), open: make(chan struct{})}
	close(n.aggsTail.open)
	if err := aggs.Start(ctx, n.aggsTail); err != nil {
		t.Fatal(err)
	}
	n.history = &gatedTail{Tail: bus.LogTail(st.events, subj), open: make(chan struct{})}
	close(n.history.open)
	history := projection.NewHistory(disk, st.commands, subj, log)
	if err := history.Start(ctx, n.history); err != nil {
		t.Fatal(err)
	}
	cmdEnd, err := projection.LastStored(ctx, st.commands)
	if err != nil {
		t.Fatal(err)
	}
	evtEnd, err := projection.LastStored(ctx, st.events)
	if err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	if err := history.WaitThrough(wait, cmdEnd, evtEnd); err != nil {
		t.Fatal(err)
	}
	n.receipts = projection.NewReceipts(history, st.events)
	n.regs = projection.NewRegistries(st.events, disk, subj, log)
	n.pending = projection.NewPending(st.commands, st.commandConsumers, subj)
	n.proc = execute.New(execute.Config{Schemas: catalog.URLs{Base: "http://agentbus.test"}, DuplicateWindow: envDuplicateWindow},
		cat, execute.Ports{Commands: st.commands, Events: st.events, Receipts: n.receipts, Consumers: st.commandConsumers, Aggregates: aggs, Observer: n.observed}, log)
	n.agents = reconcile.NewAgentConsumers(st.events, st.commandConsumers, n.receipts, n.pending, n.regs.Agents, n.proc, subj, log)
	n.proc.HandleControlPlane()
	n.wireOps()
	return n
}

func (n *node) wireOps() {
	schemas := catalog.URLs{Base: "http://agentbus.test"}
	n.in = ingest.New(ingest.Config{Schemas: schemas}, n.cat, ingest.Ports{Commands: n.st.commands, Synthetic: n.st.synthetic,
		Receipts: n.receipts, ControlPlane: n.proc.ControlPlane(), Handoff: n.handoff}, n.log)
	reads := query.New(query.Config{}, query.Ports{Commands: n.st.commands, Events: n.st.events, Synthetic: n.st.synthetic,
		CommandConsumers: n.st.commandConsumers, Receipts: n.receipts, Registries: n.regs, Pending: n.pending,
		ControlPlane: n.proc.ControlPlane(), Deliveries: n.st.webhooks.Deliveries}, n.log)
	n.ops = ops.New(ops.Config{Schemas: schemas}, n.cat, ops.Ports{
		Submit: opcommand.NewSubmit(n.cat, n.in),
		Registry: opcommand.NewRegistry(n.cat, 0, opcommand.RegistryPorts{Ingest: n.in, Receipts: n.receipts, Registries: n.regs,
			AgentConsumers: n.agents, ControlPlane: n.proc.ControlPlane(), Delivery: n.st.webhooks}),
		Delivery: opcommand.NewDelivery(opcommand.DeliveryPorts{Subscriptions: n.regs.Subscriptions, Control: n.st.webhooks,
			Events: n.st.events, Cursors: reads}),
		Records: read.NewRegistry(read.RegistryPorts{Registries: n.regs, Deliveries: n.st.webhooks.Deliveries,
			Records: reads.DeliveryRecords}),
		Reader: reads, Receipts: n.receipts, LogEnd: n.st.events,
	})
}

func (n *node) Handle(typ string, d decide.Decider) { n.proc.Handle(typ, d) }

// EnableHandoff passes the commands this node queues to its processor in
// memory, as a server running the processor does.
func (n *node) EnableHandoff() {
	n.handoff = n.proc.EnableHandoff()
	n.wireOps()
}

func (n *node) ProcessCommand(ctx context.Context, d bus.Delivery) { n.proc.Handler()(ctx, d) }
func (n *node) RejectUndelivered(ctx context.Context, d bus.Delivery) {
	n.proc.UndeliveredHandler()(ctx, d)
}
func (n *node) ReconcileAgents(ctx context.Context, d bus.Delivery) {
	settle.Wrap(n.agents.Policy(), settle.Func(n.agents.Project))(ctx, d)
}
func (n *node) StartRegistries(ctx context.Context) error   { return n.regs.Start(ctx) }
func (n *node) RebuildRegistries(ctx context.Context) error { return n.regs.Rebuild(ctx) }
func (n *node) Receipt(ctx context.Context, tenant, corr string) (*projection.Receipt, error) {
	return n.receipts.Get(ctx, tenant, corr)
}
func (n *node) SubmitCommand(ctx context.Context, tenant string, raw []byte) (*ingest.Accepted, error) {
	return n.in.SubmitCommand(ctx, tenant, raw)
}
func (n *node) GetTrace(ctx context.Context, tenant, corr string) (*query.Trace, error) {
	return n.ops.Reader().GetTrace(ctx, tenant, corr)
}
func (n *node) Operations() []ops.Operation { return n.ops.Operations() }

const tenant = "default"

func testLogger() *slog.Logger {
	if os.Getenv("AGENTBUS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// envDuplicateWindow is the duplicate window the test Apps are told: short,
// so a processing stall past it can be tested in a second. The streams keep
// 2 minutes, so duplicates within a test are still caught by the server.
const envDuplicateWindow = time.Second

// newNatsEnv starts the server and the app; setup runs before consumers
// are created (register Deciders there).
func newNatsEnv(t *testing.T, setup func(*node)) *natsEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := testLogger()
	conn, err := natsjs.Connect(ctx, natsjs.Config{DataDir: t.TempDir()}, log)
	if err != nil {
		t.Fatalf("embedded nats: %v", err)
	}
	t.Cleanup(conn.Close)
	specs, err := natsjs.LoadSpecs(streams.Files, natsjs.Settings{
		Prefix: "agentbus", Replicas: 1, Storage: "file",
		DuplicateWindow: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	var stores, consumers []natsjs.Spec
	for _, sp := range specs {
		if sp.Kind == "consumer" {
			if sp.Name != "processor" {
				consumers = append(consumers, sp)
			}
		} else {
			stores = append(stores, sp)
		}
	}
	if err := conn.Apply(ctx, stores, nil); err != nil {
		t.Fatal(err)
	}
	e := &natsEnv{t: t, conn: conn, names: natsjs.NamesFor("agentbus")}
	var st envStores
	if st.commands, err = conn.Log(ctx, e.names.Commands); err != nil {
		t.Fatal(err)
	}
	if st.events, err = conn.Log(ctx, e.names.Events); err != nil {
		t.Fatal(err)
	}
	e.cmds, e.events = st.commands, st.events
	st.commandConsumers = conn.Consumers(e.names.Commands)
	st.eventConsumers = conn.Consumers(e.names.Events)
	if st.synthetic, err = conn.Log(ctx, e.names.Synthetic); err != nil {
		t.Fatal(err)
	}
	wn := e.names
	st.webhooks = &webhook.Control{}
	if st.webhooks.State, err = conn.KV(ctx, wn.Webhooks); err != nil {
		t.Fatal(err)
	}
	if st.webhooks.DeadLetters, err = conn.Log(ctx, wn.DeadLetters); err != nil {
		t.Fatal(err)
	}
	records, err := conn.KV(ctx, wn.Deliveries)
	if err != nil {
		t.Fatal(err)
	}
	st.webhooks.Deliveries = record.NewDeliveries(records, log)
	cat, err := catalog.Load(catalog.Builtin(), config.ExampleCatalog())
	if err != nil {
		t.Fatal(err)
	}
	e.stores, e.cat = st, cat
	e.app = newNode(t, st, e.disk(), cat, log)
	if setup != nil {
		setup(e.app)
	}
	if err := conn.Apply(ctx, consumers, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *natsEnv) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

var cmdSeq atomic.Int64

// command returns a valid command envelope.
func command(typ, schema string, data any) []byte {
	b, err := json.Marshal(map[string]any{
		"specversion": "1.0", "id": fmt.Sprintf("c-%d-%d", time.Now().UnixNano(), cmdSeq.Add(1)),
		"source": "app-test", "type": typ, "datacontenttype": "application/json",
		"dataschema": schema, "time": time.Now().UTC().Format(time.RFC3339), "data": data,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// submit queues raw and returns the stored command message.
func (e *natsEnv) submit(raw []byte) (*ingest.Accepted, *bus.Message) {
	e.t.Helper()
	ctx := e.ctx()
	acc, err := e.app.SubmitCommand(ctx, tenant, raw)
	if err != nil {
		e.t.Fatalf("SubmitCommand: %v", err)
	}
	m, err := e.cmds.Get(ctx, acc.Seq)
	if err != nil {
		e.t.Fatalf("stored command %d: %v", acc.Seq, err)
	}
	return acc, m
}

// publishCommand stores a command message straight on the command stream,
// as an internal service on NATS would.
func (e *natsEnv) publishCommand(subject string, hdr bus.Header, data []byte) *bus.Message {
	e.t.Helper()
	m := &bus.Message{Subject: subject, Header: hdr, Data: data}
	if m.Header == nil {
		m.Header = bus.Header{}
	}
	seq, err := e.cmds.Append(e.ctx(), []*bus.Message{m}, nil)
	if err != nil {
		e.t.Fatalf("publish command: %v", err)
	}
	stored, err := e.cmds.Get(e.ctx(), seq)
	if err != nil {
		e.t.Fatal(err)
	}
	return stored
}

// process hands m to ProcessCommand as one delivery and returns how the
// delivery was settled.
func (e *natsEnv) process(m *bus.Message, n uint64) string {
	e.t.Helper()
	return e.processOn(e.app, m, n)
}

// processOn hands m to a's processor as its n-th delivery.
func (e *natsEnv) processOn(a *node, m *bus.Message, n uint64) string {
	e.t.Helper()
	d := &delivery{msg: *m, n: n}
	a.ProcessCommand(e.ctx(), d)
	return d.settled()
}

// replica returns another node on the same stores, as a second agentbus
// process would run; setup registers its Deciders.
func (e *natsEnv) replica(setup func(*node)) *node {
	r := newNode(e.t, e.stores, e.disk(), e.cat, testLogger())
	if setup != nil {
		setup(r)
	}
	return r
}

// disk opens a replica's own disk, empty, closed when the test ends.
func (e *natsEnv) disk() bus.Disk {
	disk, _, err := localstore.Open(e.t.TempDir(), localstore.MinMemory, slog.New(slog.DiscardHandler))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { disk.Close() })
	return disk
}

// allEvents returns every stored event, in stream order.
func (e *natsEnv) allEvents() []*bus.Message {
	e.t.Helper()
	var out []*bus.Message
	from := uint64(1)
	for {
		ms, err := e.events.Range(e.ctx(), "agentbus.evt.>", from, 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(ms) == 0 {
			return out
		}
		out = append(out, ms...)
		from = ms[len(ms)-1].Seq + 1
	}
}

// eventsOf returns the stored events carrying correlation id corr.
func (e *natsEnv) eventsOf(corr string) []*bus.Message {
	e.t.Helper()
	var out []*bus.Message
	for _, m := range e.allEvents() {
		if m.Header.Get(bus.HeaderCorrelationID) == corr {
			out = append(out, m)
		}
	}
	return out
}

// receipt waits until the receipt of corr satisfies ok.
func (e *natsEnv) receipt(corr string, ok func(*projection.Receipt) bool) *projection.Receipt {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := e.app.Receipt(e.ctx(), tenant, corr)
		if err == nil && ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("receipt of %s: %+v, %v", corr, r, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// delivery is a bus.Delivery that records how it was settled.
type delivery struct {
	msg bus.Message
	n   uint64
	mu  sync.Mutex
	how []string
}

var _ bus.Delivery = (*delivery)(nil)

func (d *delivery) Message() *bus.Message { return &d.msg }
func (d *delivery) NumDelivered() uint64  { return d.n }
func (d *delivery) Ack(context.Context) error {
	d.settle("ack")
	return nil
}
func (d *delivery) Nak(time.Duration) error { d.settle("nak"); return nil }
func (d *delivery) Term(string) error       { d.settle("term"); return nil }
func (d *delivery) settle(how string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.how = append(d.how, how)
}

// settled returns the one settlement, or a description of the misuse.
func (d *delivery) settled() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.how) != 1 {
		return fmt.Sprintf("settled %d times: %v", len(d.how), d.how)
	}
	return d.how[0]
}

// with returns e reporting to t (a subtest).
func (e *natsEnv) with(t *testing.T) *natsEnv {
	c := *e
	c.t = t
	return &c
}

// gatedTail is a tail of the event log that hands on nothing while open
// is an open channel that is not closed (pauseHistory): a history that
// has not caught up.
type gatedTail struct {
	bus.Tail
	mu   sync.Mutex
	open chan struct{}
}

func (g *gatedTail) Follow(ctx context.Context, filter string, from uint64, fn func(*bus.Event)) {
	g.Tail.Follow(ctx, filter, from, func(ev *bus.Event) {
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		select {
		case <-open:
		case <-ctx.Done():
			return
		}
		fn(ev)
	})
}

// pause holds back what the tail hands on until the returned func runs.
func (g *gatedTail) pause() (resume func()) {
	open := make(chan struct{})
	g.mu.Lock()
	g.open = open
	g.mu.Unlock()
	return sync.OnceFunc(func() { close(open) })
}
