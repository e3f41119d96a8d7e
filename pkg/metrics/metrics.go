// Package metrics is agentbus's Prometheus exposition: the families an
// operator watches and alerts on, the Go and process collectors, and the
// HTTP handler that serves them. The runtime reports to it through the
// small observer seams it declares (ops.Middleware and Config.Live,
// process.Observer, webhook.Observer) and never imports Prometheus;
// pkg/server wires the two together. Label values are bounded: a
// transport, an operation id, an error code, an outcome — never a tenant,
// agent or subscription id.
package metrics

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// CodeOK is the code label of a call that succeeded.
const CodeOK = "OK"

// Metrics is one registry of agentbus's families. Safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	processed       *prometheus.CounterVec
	conflicts       prometheus.Counter
	commandToEvent  prometheus.Histogram
	attempts        *prometheus.CounterVec
	attemptDuration prometheus.Histogram
	deadLetters     prometheus.Counter
	push            *pushStreams
	gauges          *gauges
	// byCall caches the series of each (transport, operation) that every
	// successful call moves, by callKey.
	byCall sync.Map
	// byProcessed and byAttempt are the series of each known outcome,
	// made in New and only read after.
	byProcessed, byAttempt map[string]prometheus.Counter
}

// outcome returns the series of outcome: the one made in New, or else
// vec's.
func outcome(known map[string]prometheus.Counter, vec *prometheus.CounterVec, o string) prometheus.Counter {
	if c, ok := known[o]; ok {
		return c
	}
	return vec.WithLabelValues(o)
}

type callKey struct{ transport, operation string }

// callSeries are the series a successful call of one (transport,
// operation) moves.
type callSeries struct {
	ok       prometheus.Counter
	duration prometheus.Observer
}

// Gauges are read when Prometheus scrapes: each nil func is left out.
type Gauges struct {
	// NATSConnected reports whether the NATS connection is up.
	NATSConnected func() bool
	// ProcessingBacklog counts the commands accepted and not yet
	// processed by agentbus's processor.
	ProcessingBacklog func(ctx context.Context) (float64, error)
	// WebhookBacklog is the age of the oldest event not yet delivered to
	// its subscription by this replica.
	WebhookBacklog func() time.Duration
	// MCPSessions counts the MCP sessions open, each a push stream of
	// the events of the commands it follows.
	MCPSessions func() int
	// PushesUnsent counts the pushes recorded here that the other
	// replicas were not told of (pushlog.Log.Dropped).
	PushesUnsent func() uint64
}

// New returns the families registered, with the Go and process
// collectors and build information of version.
func New(version string) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbus_requests_total",
			Help: "Operation calls by transport (rest, mcp, a2a), operation id and outcome code (OK or the error code).",
		}, []string{"transport", "operation", "code"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentbus_request_duration_seconds",
			Help:    "Time an operation call took at the door, by transport and operation (a live stream: until it ended).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"transport", "operation"}),
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbus_commands_processed_total",
			Help: "Command deliveries agentbus's processor handled, by outcome: done (events stored), rejected (CommandRejected stored), failed (retried).",
		}, []string{"outcome"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbus_command_conflicts_total",
			Help: "Appends of a command's events refused because another writer appended to its aggregate, or the aggregate's shard, after the decision (optimistic concurrency); the command is decided again.",
		}),
		commandToEvent: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "agentbus_command_to_event_seconds",
			Help:    "Time from a command's storing (accepted) to its events' storing, for the commands agentbus processes.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbus_webhook_attempts_total",
			Help: "Webhook delivery attempts by outcome: delivered, retrying, failed (dead-lettered), disabled (410 Gone).",
		}, []string{"outcome"}),
		attemptDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "agentbus_webhook_attempt_duration_seconds",
			Help:    "Time a webhook delivery attempt's request took.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbus_webhook_dead_letters_total",
			Help: "Events dead-lettered after their last delivery attempt failed.",
		}),
		push: &pushStreams{desc: prometheus.NewDesc("agentbus_push_streams",
			"Push streams open on this replica, by transport: rest (SSE), mcp (sessions), a2a (task streams).",
			[]string{"transport"}, nil)},
		gauges: newGauges(),
	}
	m.push.gauges = m.gauges
	reg.MustRegister(m.requests, m.requestDuration, m.processed, m.conflicts, m.commandToEvent,
		m.attempts, m.attemptDuration, m.deadLetters, m.push, m.gauges,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentbus_build_info", Help: "agentbus's version, as a label; always 1.",
			ConstLabels: prometheus.Labels{"version": version},
		}, func() float64 { return 1 }))
	// Every outcome is present from the start, so a rate over it exists
	// before the first of its kind.
	m.byProcessed, m.byAttempt = map[string]prometheus.Counter{}, map[string]prometheus.Counter{}
	for _, o := range []string{"done", "rejected", "failed"} {
		m.byProcessed[o] = m.processed.WithLabelValues(o)
	}
	for _, o := range []string{"delivered", "retrying", "failed", "disabled"} {
		m.byAttempt[o] = m.attempts.WithLabelValues(o)
	}
	return m
}

// Watch sets the gauges read at each scrape, in place of those set
// before: a gauge whose func is nil is left out of the exposition.
func (m *Metrics) Watch(g Gauges) { m.gauges.set.Store(&g) }

// gauges are the families read at each scrape from Gauges.
type gauges struct {
	set                                       atomic.Pointer[Gauges]
	connected, processing, webhookAge, unsent *prometheus.Desc
}

func newGauges() *gauges {
	return &gauges{
		connected: prometheus.NewDesc("agentbus_nats_connected", "1 while agentbus's NATS connection is up, else 0.", nil, nil),
		processing: prometheus.NewDesc("agentbus_processing_backlog",
			"Commands accepted and not yet processed by agentbus's processor (its consumer's pending and unacknowledged messages); -1 when NATS does not say.", nil, nil),
		webhookAge: prometheus.NewDesc("agentbus_webhook_backlog_seconds",
			"Age of the oldest event this replica has not yet delivered to a subscription it delivers (0: caught up).", nil, nil),
		unsent: prometheus.NewDesc("agentbus_push_records_unsent_total",
			"Pushes to live listeners recorded on this replica that the other replicas' traces miss: NATS did not take their batch, or too many waited.", nil, nil),
	}
}

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.connected
	ch <- g.processing
	ch <- g.webhookAge
	ch <- g.unsent
}

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	set := g.set.Load()
	if set == nil {
		return
	}
	if f := set.NATSConnected; f != nil {
		v := 0.0
		if f() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(g.connected, prometheus.GaugeValue, v)
	}
	if f := set.ProcessingBacklog; f != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n, err := f(ctx)
		cancel()
		if err != nil {
			n = -1
		}
		ch <- prometheus.MustNewConstMetric(g.processing, prometheus.GaugeValue, n)
	}
	if f := set.WebhookBacklog; f != nil {
		ch <- prometheus.MustNewConstMetric(g.webhookAge, prometheus.GaugeValue, f().Seconds())
	}
	if f := set.PushesUnsent; f != nil {
		ch <- prometheus.MustNewConstMetric(g.unsent, prometheus.CounterValue, float64(f()))
	}
}

// Handler serves the exposition (GET /metrics), in the format the
// scraper asks for.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// Registry is the registry the families are in, for a program that adds
// its own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Middleware counts and times every call at the door (ops.Config.Middleware).
func (m *Metrics) Middleware() ops.Middleware {
	return func(next ops.Handler) ops.Handler {
		return func(ctx context.Context, c *ops.Call, r *ops.Request, emit ops.Emit) (*ops.Response, error) {
			start := time.Now()
			res, err := next(ctx, c, r, emit)
			s := m.series(c.Caller().Transport, c.Op().ID)
			if err == nil {
				s.ok.Inc()
			} else {
				m.requests.WithLabelValues(transport(c.Caller().Transport), c.Op().ID, string(errs.As(err).Code)).Inc()
			}
			s.duration.Observe(time.Since(start).Seconds())
			return res, err
		}
	}
}

// series returns the cached series of calls of operation over t.
func (m *Metrics) series(t, operation string) *callSeries {
	k := callKey{t, operation}
	if s, ok := m.byCall.Load(k); ok {
		return s.(*callSeries)
	}
	t = transport(t)
	s, _ := m.byCall.LoadOrStore(k, &callSeries{ok: m.requests.WithLabelValues(t, operation, CodeOK),
		duration: m.requestDuration.WithLabelValues(t, operation)})
	return s.(*callSeries)
}

// Live counts a live stream open on transport (ops.Config.Live).
func (m *Metrics) Live(t string) (closed func()) {
	n := m.push.counter(transport(t))
	n.Add(1)
	return func() { n.Add(-1) }
}

// pushStreams is agentbus_push_streams: the door's live streams by
// transport, and the MCP sessions as the MCP transport counts them.
type pushStreams struct {
	desc           *prometheus.Desc
	rest, a2a, own atomic.Int64
	gauges         *gauges // MCPSessions
}

// counter is the count of transport's streams at the door.
func (p *pushStreams) counter(t string) *atomic.Int64 {
	switch t {
	case "rest":
		return &p.rest
	case "a2a":
		return &p.a2a
	}
	return &p.own
}

func (p *pushStreams) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p *pushStreams) Collect(ch chan<- prometheus.Metric) {
	mcp := float64(0)
	if g := p.gauges.set.Load(); g != nil && g.MCPSessions != nil {
		mcp = float64(g.MCPSessions())
	}
	for _, v := range []struct {
		t string
		n float64
	}{{"rest", float64(p.rest.Load())}, {"mcp", mcp}, {"a2a", float64(p.a2a.Load())}} {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, v.n, v.t)
	}
}

// transport is the label of a call's transport: "internal" for one made
// in process.
func transport(t string) string {
	if t == "" {
		return "internal"
	}
	return t
}

// Processor is what the processor reports to (process.Observer).
func (m *Metrics) Processor() Processor { return Processor{m} }

// Processor implements process.Observer.
type Processor struct{ m *Metrics }

// Processed counts a delivery processed, and times a stored outcome.
func (p Processor) Processed(o string, waited time.Duration) {
	outcome(p.m.byProcessed, p.m.processed, o).Inc()
	if o != "failed" {
		p.m.commandToEvent.Observe(max(waited, 0).Seconds())
	}
}

// Conflicted counts an append refused after a concurrent one.
func (p Processor) Conflicted() { p.m.conflicts.Inc() }

// Webhooks is what webhook delivery reports to (webhook.Observer).
func (m *Metrics) Webhooks() Webhooks { return Webhooks{m} }

// Webhooks implements webhook.Observer.
type Webhooks struct{ m *Metrics }

// Attempted counts and times an attempt.
func (w Webhooks) Attempted(o string, took time.Duration) {
	outcome(w.m.byAttempt, w.m.attempts, o).Inc()
	w.m.attemptDuration.Observe(took.Seconds())
}

// DeadLettered counts a dead letter.
func (w Webhooks) DeadLettered() { w.m.deadLetters.Inc() }
