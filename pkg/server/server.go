// Package server wires agentbus together: config → NATS → streams → app →
// consumers → HTTP. cmd/agentbus calls Run; tests call Start.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/execute"
	"github.com/agentbus/agentbus/pkg/follow"
	"github.com/agentbus/agentbus/pkg/ingest"
	"github.com/agentbus/agentbus/pkg/localstore"
	"github.com/agentbus/agentbus/pkg/manifest"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/openapi"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/ops/command"
	"github.com/agentbus/agentbus/pkg/ops/read"
	"github.com/agentbus/agentbus/pkg/opsport"
	"github.com/agentbus/agentbus/pkg/projection"
	"github.com/agentbus/agentbus/pkg/push"
	"github.com/agentbus/agentbus/pkg/pushlog"
	"github.com/agentbus/agentbus/pkg/query"
	"github.com/agentbus/agentbus/pkg/reconcile"
	"github.com/agentbus/agentbus/pkg/secrets"
	"github.com/agentbus/agentbus/pkg/server/host"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/pkg/settle"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/agentbus/agentbus/pkg/transport/mcp"
	"github.com/agentbus/agentbus/pkg/transport/rest"
	"github.com/agentbus/agentbus/pkg/webhook"
	"github.com/agentbus/agentbus/pkg/webhook/record"
	"github.com/agentbus/agentbus/pkg/webhook/send"
	"github.com/agentbus/agentbus/streams"
)

// Version is agentbus's version and Commit the revision it was built
// from, set at build time (-ldflags -X, as make build does); an empty
// Commit is read from the binary's build information.
var (
	Version = "dev"
	Commit  = ""
)

// Server is a running agentbus.
type Server struct {
	// Ops is the operations table and its use cases; Registries the
	// agents, services and subscriptions read models; TypeIndex the
	// events' sequences by type; Secrets the subscriptions' signing
	// secrets.
	Ops        *ops.Surface
	Registries *projection.Registries
	TypeIndex  *projection.TypeIndex
	Secrets    *secrets.Store
	// History is the correlation index on the replica's disk; Copies the
	// copies of the events there (nil when reads.eventCopies is off).
	History *projection.History
	Copies  *projection.EventCopies
	// Endpoints are the operations as REST serves them.
	Endpoints []rest.Endpoint
	// MCP is the MCP transport.
	MCP  *mcp.Transport
	Conn *natsjs.Conn
	// Ready is what the operations listener's GET /readyz reports
	// (NewReadiness).
	Ready *opsport.Readiness
	// Addr is the HTTP address actually listened on.
	Addr string
	// URL is http://Addr.
	URL string

	cfg    settings.Config
	log    *slog.Logger
	http   *http.Server
	cancel context.CancelFunc
	// endStreams ends the live streams, which http.Server.Shutdown would
	// wait for.
	endStreams context.CancelFunc
	workers    sync.WaitGroup
	serveErr   chan error
	catalog    *catalogReload
	metrics    *metrics.Metrics
	// disk holds the replica's on-disk read models, and copyDisk the
	// copies of the events (Copies; nil when off), closed once the
	// workers that write them have ended.
	disk, copyDisk *localstore.Store
	// parent is the context Start was given: the catch-up of the read
	// models on disk waits on it, not on one try's bound.
	parent context.Context
}

// Metrics serves agentbus's Prometheus exposition (GET /metrics): the
// handler to mount on the operations listener. The families exist from
// the Server's making; the gauges read at each scrape (NATS, backlogs)
// from the start of serving. With ops.metrics off nothing is kept, and
// the handler answers 404 saying so.
func (s *Server) Metrics() http.Handler {
	if s.metrics == nil {
		return http.HandlerFunc(metricsOff)
	}
	return s.metrics.Handler()
}

// metricsOff answers a scrape of a server that keeps no metrics.
func metricsOff(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, "metrics are off on this agentbus (ops.metrics: false, AGENTBUS_OPS_METRICS, --ops-metrics): nothing is counted\n")
}

// instruments are what the runtime reports to: the door's middleware
// (the metrics', when ops.metrics is on, then tracing's) and the metrics'
// observers, each zero (nothing observed) when ops.metrics is off.
type instruments struct {
	middleware []ops.Middleware
	live       func(transport string) (closed func())
	processor  execute.Observer
	webhooks   webhook.Observer
}

// instruments returns the instruments of s.
func (s *Server) instruments() instruments {
	if s.metrics == nil {
		return instruments{middleware: []ops.Middleware{traceCalls}}
	}
	return instruments{middleware: []ops.Middleware{s.metrics.Middleware(), traceCalls}, live: s.metrics.Live,
		processor: s.metrics.Processor(), webhooks: s.metrics.Webhooks()}
}

// StreamSettings derives the stream file variables from cfg.
func StreamSettings(cfg settings.Config) natsjs.Settings {
	return natsjs.Settings{
		Prefix: cfg.NATS.Prefix, Replicas: cfg.NATS.Replicas, Storage: cfg.NATS.Storage,
		CommandMaxAge: cfg.Streams.CommandMaxAge.D(), SyntheticMaxAge: cfg.Streams.SyntheticMaxAge.D(),
		DuplicateWindow:  cfg.Streams.DuplicateWindow.D(),
		CommandConsumers: cfg.PlannedCommandConsumers(),
	}
}

// NATSConfig derives the NATS connection settings from cfg. The embedded
// server requires credentials on its client port when cfg does
// (EmbeddedRequiresAuth), and takes nats.embedded.users.
func NATSConfig(cfg settings.Config) natsjs.Config {
	nc := natsjs.Config{
		URL: cfg.NATS.URL, CredsFile: cfg.NATS.Creds, NKeyFile: cfg.NATS.NKey,
		TLSCA: cfg.NATS.TLS.CA, TLSCert: cfg.NATS.TLS.Cert, TLSKey: cfg.NATS.TLS.Key,
		DataDir: cfg.Data, Listen: cfg.EmbeddedListen(), SyncAlways: cfg.NATS.Sync == "always",
		RequireAuth: cfg.EmbeddedRequiresAuth(), Prefix: cfg.NATS.Prefix,
		ReadConns: cfg.Reads.Connections,
	}
	for _, u := range cfg.NATS.Embedded.Users {
		nc.Users = append(nc.Users, natsjs.User{
			Name: u.User, Password: u.Password.Reveal(), PasswordFile: u.PasswordFile, NKey: u.NKey,
			Tenants: u.TenantList(), Commands: natsjs.Access(u.CommandRights()), Events: natsjs.Access(u.EventRights()),
			Consumers: u.Consumers,
		})
	}
	return nc
}

// The processor records what the reconciler cannot do.
var _ reconcile.EventWriter = (*execute.Processor)(nil)

// Start brings agentbus up and returns once it serves HTTP. Stop ends it.
// Any failure is returned at once; StartWaiting waits out a NATS that is
// not ready yet.
// When it fails it leaves nothing of the embedded server's data dir that it
// made (natsjs.Conn.Abandon).
func Start(ctx context.Context, cfg settings.Config, log *slog.Logger) (*Server, error) {
	ready := NewReadiness()
	cat, files, err := loadCatalog(cfg, ready)
	if err != nil {
		return nil, err
	}
	return startOnce(ctx, cfg, log, cat, files, ready)
}

// The readiness checks of a Server (GET /readyz on the operations
// listener), in the order start-up passes them: the catalogue loaded, NATS
// connected (and staying so), the streams and buckets applied (and still
// there, asked every StreamsCheckEvery), the projections (registries, push
// hub) caught up with the event log at start.
const (
	ReadyCatalog     = "catalog"
	ReadyNATS        = "nats"
	ReadyStreams     = "streams"
	ReadyProjections = "projections"
	// ReadyIndex: the read models on disk hold the logs up to where they
	// were at the start.
	ReadyIndex = "index"
)

// NewReadiness returns the readiness of an agentbus not started yet.
func NewReadiness() *opsport.Readiness {
	return opsport.NewReadiness(ReadyCatalog, ReadyNATS, ReadyStreams, ReadyIndex, ReadyProjections)
}

// Backoff bounds StartWaiting's pauses between tries: the first, doubled
// after each failed try up to Max. Try bounds one try: connecting, the
// server's checks, the streams, the replay of the registries.
var Backoff = struct{ First, Max, Try time.Duration }{First: time.Second, Max: 30 * time.Second, Try: 30 * time.Second}

// StartWaiting is Start for a replica that may start before its NATS
// server or cluster can serve it: started together with the servers, with
// other replicas applying the same streams, or while the cluster elects
// its leaders. With an external NATS (nats.url), a try that fails for a
// reason a later try may not meet (natsjs.NotYet) is logged and tried
// again after a pause that doubles up to Backoff.Max, until one succeeds
// or ctx ends; meanwhile ready says what is not ready. Other errors (the
// configuration, the catalogue, a server too old, refused credentials, a
// taken address) are returned at once, as by Start.
func StartWaiting(ctx context.Context, cfg settings.Config, log *slog.Logger, ready *opsport.Readiness) (*Server, error) {
	cat, files, err := loadCatalog(cfg, ready)
	if err != nil {
		return nil, err
	}
	pause := Backoff.First
	for try := 1; ; try++ {
		s, err := startOnce(ctx, cfg, log, cat, files, ready)
		if err == nil || cfg.NATS.URL == "" || !natsjs.NotYet(err) {
			return s, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		wait := pause/2 + rand.N(pause/2+1) // jitter: replicas started together do not retry together
		ready.Set(ReadyNATS, fmt.Errorf("not ready yet (%v); trying again in %s", err, wait.Round(time.Millisecond)))
		ready.Set(ReadyStreams, errors.New("pending"))
		log.Warn("NATS cannot serve agentbus yet; trying again", "err", err, "try", try, "in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		pause = min(2*pause, Backoff.Max)
	}
}

// loadCatalog validates cfg and loads the catalogue, with the fingerprint
// of its files as they were before the load ("" when they cannot be read:
// a change made while agentbus starts is caught by the first poll).
func loadCatalog(cfg settings.Config, ready *opsport.Readiness) (*catalog.Catalog, string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, "", err
	}
	dirs, err := catalogDirs(cfg)
	if err != nil {
		return nil, "", err
	}
	files, _ := catalog.Fingerprint(dirs...)
	cat, err := catalog.Load(dirs...)
	if err != nil {
		ready.Set(ReadyCatalog, err)
		return nil, "", err
	}
	ready.Set(ReadyCatalog, nil)
	return cat, files, nil
}

// startOnce connects to NATS and starts agentbus on it, within Backoff.Try.
func startOnce(ctx context.Context, cfg settings.Config, log *slog.Logger, cat *catalog.Catalog, files string, ready *opsport.Readiness) (*Server, error) {
	cctx, cancel := context.WithTimeout(ctx, Backoff.Try)
	defer cancel()
	ncfg := NATSConfig(cfg)
	ncfg.WaitForServer = true // NATS may start together with agentbus
	ready.Set(ReadyNATS, errors.New("connecting"))
	conn, err := natsjs.Connect(cctx, ncfg, log)
	if err != nil {
		ready.Set(ReadyNATS, err)
		return nil, err
	}
	// A line logged with a command's context names its trace.
	log = slog.New(tracing.Logs(log.Handler()))
	s := &Server{Conn: conn, Ready: ready, cfg: cfg, log: log, serveErr: make(chan error, 1), parent: ctx}
	if cfg.Ops.Metrics {
		s.metrics = metrics.New(Version)
	}
	ready.Watch(ReadyNATS, s.natsConnected)
	if err := s.start(cctx, cat); err != nil {
		conn.Abandon() // a failed start leaves no data dir it made
		return nil, err
	}
	s.catalog.files = files
	return s, nil
}

// StreamsCheckEvery is how often the readiness check of the streams and
// buckets asks the server whether each is there (a cached check: GET
// /readyz reads its last answer).
var StreamsCheckEvery = 2 * time.Second

// storesPresent is the readiness check of the streams and buckets of
// stores: ready while the server holds every one. A server that does not
// answer leaves the check as it was (the nats check says why).
func storesPresent(conn *natsjs.Conn, stores []natsjs.Spec) func(context.Context) error {
	return func(ctx context.Context) error {
		missing, err := conn.Missing(ctx, stores)
		switch {
		case err != nil:
			return fmt.Errorf("%w: %v", opsport.ErrUnknown, err)
		case len(missing) > 0:
			return fmt.Errorf("missing on the NATS server: %s; agentbus streams apply creates them again", strings.Join(missing, ", "))
		}
		return nil
	}
}

// natsConnected is the readiness check of the connection to NATS.
func (s *Server) natsConnected() error {
	if !s.Conn.NC.IsConnected() {
		return fmt.Errorf("not connected to NATS (%s)", s.Conn.NC.Status())
	}
	return nil
}

// boundPublicURL returns the publicUrl to use when none is configured and
// listen asks for any free port (port 0): the configured host with the port
// actually bound. Otherwise it returns "" and rest.endpoint stays
// http://<listen> as configured (never the wildcard address listened on).
func boundPublicURL(listen string, bound net.Addr) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port != "0" {
		return ""
	}
	_, p, err := net.SplitHostPort(bound.String())
	if err != nil {
		return ""
	}
	return "http://" + net.JoinHostPort(host, p)
}

func (s *Server) start(ctx context.Context, cat *catalog.Catalog) error {
	log, conn := s.log, s.Conn
	obs := s.instruments()
	if err := conn.Check(ctx, s.cfg.NATS.Prefix); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w; set listen (--listen, AGENTBUS_LISTEN) to a free address, e.g. --listen 127.0.0.1:9090", s.cfg.Listen, err)
	}
	s.Addr = ln.Addr().String()
	s.URL = "http://" + s.Addr
	if s.cfg.PublicURL == "" {
		s.cfg.PublicURL = boundPublicURL(s.cfg.Listen, ln.Addr())
	}
	cfg := s.cfg
	defer func() {
		if s.http == nil {
			ln.Close()
		}
	}()
	specs, err := natsjs.LoadSpecs(streams.Files, StreamSettings(cfg))
	if err != nil {
		return err
	}
	names := natsjs.NamesFor(cfg.NATS.Prefix)
	subj := bus.Subjects{Prefix: cfg.NATS.Prefix}
	if cfg.Streams.ReceiptTTL != 0 {
		log.Warn("streams.receiptTTL is no longer used and can be removed: no receipt is kept in the NATS server's memory, each replica's history on disk is the correlation index")
	}

	// Streams and buckets first, then the rooms, then the consumers: the
	// processor's filter comes from the deciders the processor has, so
	// only types processed here are taken off the command stream by it.
	var stores, consumers []natsjs.Spec
	for _, sp := range specs {
		if sp.Kind == "consumer" {
			consumers = append(consumers, sp)
		} else {
			stores = append(stores, sp)
		}
	}
	if err := conn.Apply(ctx, stores, nil); err != nil {
		return err
	}
	s.Ready.Set(ReadyStreams, nil)
	st, err := openStores(ctx, conn, names)
	if err != nil {
		return err
	}
	multi := cfg.Tenancy.Mode == "multi"
	schemas := catalog.URLs{Base: cfg.Endpoint(), MultiTenant: multi}
	disk, copyDisk, err := openDisks(ctx, cfg, st, subj, cfg.Reads.EventCopies, log)
	if err != nil {
		return err
	}
	s.disk, s.copyDisk = disk, copyDisk
	defer func() {
		if s.http == nil {
			disk.Close()
			copyDisk.Close()
		}
	}()
	history := projection.NewHistory(disk, st.queries.commands, subj, log)
	receipts := projection.NewReceipts(history, st.events)
	tail := follow.New(st.events, st.queries.events, subj, log)
	regs := projection.NewRegistries(st.events, disk, subj, log)
	aggs := projection.NewAggregates(disk, subj, log)
	var types *projection.TypeIndex
	if cfg.Reads.TypeIndex {
		types = projection.NewTypeIndex(disk, subj, log)
	}
	// The reads' event log: by sequence from the copies on disk, where
	// they hold what is asked.
	readEvents := st.queries.events
	var copies *projection.EventCopies
	if copyDisk != nil {
		copies = projection.NewEventCopies(copyDisk, log)
		readEvents = copies.Log(st.queries.events)
	}
	pending := projection.NewPending(st.commands, st.commandConsumers, subj)
	quotas := decide.Quotas{Agents: cfg.Quotas.Agents, Services: cfg.Quotas.Services,
		AllAgents: cfg.PlannedCommandConsumers() - settings.ReservedConsumers, Count: regs.Count}
	secretStore, err := openSecrets(ctx, st.secrets, cfg.Subscriptions, log)
	if err != nil {
		return err
	}
	subsPorts := &decide.SubscriptionPorts{Count: regs.Subscriptions.Count, Max: cfg.Quotas.Subscriptions, SecretStored: secretStore.Stored}
	proc := execute.New(execute.Config{Prefix: cfg.NATS.Prefix, Schemas: schemas, DuplicateWindow: cfg.Streams.DuplicateWindow.D(), Quotas: quotas},
		cat, execute.Ports{Commands: st.commands, Events: st.events, Receipts: receipts, Consumers: st.commandConsumers,
			Aggregates: aggs, Subscriptions: subsPorts, Observer: obs.processor}, log)
	agents := reconcile.NewAgentConsumers(st.events, st.commandConsumers, receipts, pending, regs.Agents, proc, subj, log)
	cascade := projection.NewSubscriptionCascade(st.events, st.commands, regs.Subscriptions, secretStore, subj, log)
	proc.HandleControlPlane()
	filters := []string{}
	for _, t := range proc.ProcessedTypes() {
		filters = append(filters, subj.CommandsOfType(t))
	}
	processing := !cfg.Processor.Disabled && len(filters) > 0
	var handoff *execute.Handoff
	if processing && cfg.Processor.Handoff {
		handoff = proc.EnableHandoff()
	}
	if cfg.Events.AllowInjection {
		log.Warn("event injection is on (events.allowInjection): callers with the admin scope may POST /events; " +
			"injected events are synthetic and kept apart from production events")
	}
	wh, err := openWebhooks(ctx, conn, cfg.NATS.Prefix, log)
	if err != nil {
		return err
	}
	cursorKey, err := bus.AgreedKey(ctx, st.secrets, query.CursorKeyName, query.CursorKeyBytes)
	if err != nil {
		return fmt.Errorf("the cursor key %s: %w", query.CursorKeyName, err)
	}
	hub := push.New(st.events, cfg.NATS.Prefix, log)
	// The pushes to live listeners, for the traces: each replica keeps
	// every replica's, told over core NATS.
	pushes := pushlog.New(pushlog.Config{}, conn.Broadcast(), subj.Pushed(), log)
	urls := egress.Rules{AllowPrivate: cfg.Webhooks.AllowPrivate}
	// The operations' handlers, each on what it uses.
	in := ingest.New(ingest.Config{Prefix: cfg.NATS.Prefix, Schemas: schemas, AllowInjection: cfg.Events.AllowInjection,
		DuplicateWindow: cfg.Streams.DuplicateWindow.D()}, cat, ingest.Ports{
		Commands: st.queries.commands, Synthetic: st.queries.synthetic, Receipts: receipts, ControlPlane: proc.ControlPlane(),
		Handoff: handoff, Secrets: secretStore, URLs: urls}, log)
	reads := query.New(query.Config{Prefix: cfg.NATS.Prefix, PageDefault: cfg.Limits.PageDefault, PageMax: cfg.Limits.PageMax,
		CursorKey: cursorKey, Reads: query.ReadLimits{Concurrent: cfg.Reads.Concurrent, PerCaller: cfg.Reads.PerCredential,
			Large: cfg.Reads.Large, LargePerCaller: cfg.Reads.LargePerCredential, LargeShare: cfg.Reads.LargeShare.D()}},
		query.Ports{Commands: st.queries.commands, Events: readEvents, Synthetic: st.queries.synthetic, TypeIndex: types,
			CommandConsumers: st.commandConsumers, Receipts: receipts, Registries: regs, Pending: pending,
			ControlPlane: proc.ControlPlane(), Deliveries: wh.Deliveries, Pushes: pushes}, log)
	pc := cfg.Push
	surface := ops.New(ops.Config{Schemas: schemas, PageDefault: cfg.Limits.PageDefault, PageMax: cfg.Limits.PageMax,
		AllowInjection: cfg.Events.AllowInjection, Streams: ops.StreamConfig{Max: pc.Streams, PerCaller: pc.StreamsPerCredential,
			Heartbeat: pc.Heartbeat.D(), Recheck: pc.Recheck.D(), Queue: pc.Queue},
		Middleware: obs.middleware, Live: obs.live}, cat, ops.Ports{
		Submit: command.NewSubmit(cat, in),
		Registry: command.NewRegistry(cat, cfg.Registry.WaitTimeout.D(), command.RegistryPorts{Ingest: in, Receipts: receipts,
			Registries: regs, AgentConsumers: agents, ControlPlane: proc.ControlPlane(), Secrets: secretStore, URLs: urls, Delivery: wh}),
		Delivery: command.NewDelivery(command.DeliveryPorts{Prefix: cfg.NATS.Prefix, Subscriptions: regs.Subscriptions, Control: wh,
			Events: st.queries.events, Cursors: reads}),
		Records: read.NewRegistry(read.RegistryPorts{Registries: regs, Secrets: secretStore, Deliveries: wh.Deliveries,
			Records: reads.DeliveryRecords, CommandConsumers: st.commandConsumers, PageDefault: cfg.Limits.PageDefault, PageMax: cfg.Limits.PageMax}),
		Reader: reads, Receipts: receipts, Hub: hub, LogEnd: st.queries.events, Pushes: pushes,
	})
	s.Ops, s.Registries, s.TypeIndex, s.Secrets, s.History, s.Copies = surface, regs, types, secretStore, history, copies

	// Everything started from here on runs until wctx ends; fail stops it
	// and waits for it, and Start then closes the connection.
	wctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	fail := func(err error) error {
		cancel()
		s.workers.Wait()
		return err
	}
	// The streams and buckets stay checked while agentbus runs: one
	// deleted under it turns /readyz 503 naming it, until it is back.
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		s.Ready.Poll(wctx, ReadyStreams, StreamsCheckEvery, storesPresent(conn, stores))
	}()
	guard, err := s.openGuard(ctx, wctx)
	if err != nil {
		return fail(err)
	}
	// The HTTP side is checked before any consumer starts.
	eps, err := rest.Bind(surface.Operations())
	if err != nil {
		return fail(err)
	}
	s.Endpoints = eps
	m := manifest.Build(manifest.Config{
		Name: "agentbus", Description: "Event-sourced Agent Service Interface on NATS JetStream", Version: Version,
		Endpoint: cfg.Endpoint(), OpenAPI: cfg.Endpoint() + openapi.Path, MultiTenant: multi, Authentication: guard.ManifestBlock(),
		MCP: mcpBlock(cfg.Endpoint(), multi),
		A2A: a2aBlock(cfg.Endpoint(), multi),
	}, eps)
	limit, err := bodyLimit(cfg.Limits.BodyBytes, conn.NC.MaxPayload(), log)
	if err != nil {
		return fail(err)
	}
	streams, endStreams := context.WithCancel(context.Background())
	s.endStreams = endStreams
	rc := rest.Config{
		MultiTenant: multi, BodyLimit: limit, Manifest: m, Endpoint: cfg.Endpoint(),
		Tenants: s.tenantExists, TenantManifest: tenantManifest(m), HideTenants: guard.Enabled(),
		StreamWriteTimeout: pc.WriteTimeout.D(), Stop: streams, Sessions: []string{mcpRoute(multi)},
	}
	if !guard.Enabled() {
		rc.Hosts = ownHosts(cfg)
	}
	if err := guardREST(&rc, guard, eps); err != nil {
		return fail(err)
	}
	handler := rest.New(rc, eps, log)
	if err := s.mountMCP(handler, rc, surface); err != nil {
		return fail(err)
	}
	a2aPaths, grpcA2A := s.mountA2A(handler, guard, surface, rc)
	public := append(a2aPaths, s.mountConsole(handler, rc)...)
	if err := s.mountAuth(handler, guard, eps, rc, public...); err != nil {
		return fail(err)
	}

	// The push log hears of the other replicas' pushes before this one
	// processes a command: a push of its events elsewhere is not missed.
	if err := pushes.Start(wctx); err != nil {
		return fail(fmt.Errorf("the push log: %w", err))
	}

	filtersOf := map[string][]string{names.Commands + "/" + bus.ProcessorConsumer: filters}
	if err := conn.Apply(ctx, consumers, filtersOf); err != nil {
		return fail(err)
	}
	dropFormerReceipts(ctx, conn, names, log)
	s.catalog = &catalogReload{cfg: cfg, cat: cat, mcp: s.MCP, log: log}
	// One follower reads the event log from its end for the read models
	// on disk, the registries, the push hub and webhook delivery; each
	// reads what lies before its own position itself.
	if err := tail.Start(wctx); err != nil {
		return fail(err)
	}
	// The read models on disk take in what the logs gained since they
	// were written, before a command is processed or a request served:
	// until then, an absent receipt would not prove a command new.
	if err := s.catchUp(wctx, st, tail, history, types, aggs, copies); err != nil {
		return fail(err)
	}
	// The history learns of the commands other replicas store, so that it
	// knows whether it is current while this one stores none.
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		history.Watch(wctx, min(5*time.Second, cfg.Streams.DuplicateWindow.D()/4))
	}()
	byCorrelation := natsjs.ConsumeOptions{Workers: cfg.Processor.Workers, KeyOf: decide.CorrelationKey}
	declare := func(ctx context.Context) error {
		return conn.Apply(ctx, slices.Concat(stores, consumers), filtersOf)
	}
	byAgent := natsjs.ConsumeOptions{Workers: reconcile.Workers, KeyOf: reconcile.AgentKey}
	run := func(stream, durable string, opt natsjs.ConsumeOptions, h bus.Handler) {
		s.workers.Add(1)
		go func() {
			defer s.workers.Done()
			conn.Supervise(wctx, stream, durable, opt, h, declare, log)
		}()
	}
	if processing {
		run(names.Commands, bus.ProcessorConsumer, natsjs.ConsumeOptions{Workers: cfg.Processor.Workers, KeyOf: proc.OrderKey}, proc.Handler())
	}
	run(names.Events, bus.ControlConsumer, byAgent, settle.Wrap(agents.Policy(), settle.Func(agents.Project)))
	run(names.Events, bus.SubscriptionsConsumer, byCorrelation, settle.Wrap(cascade.Policy(), settle.Func(cascade.Project)))
	run(names.Undelivered, "undelivered", byCorrelation, proc.UndeliveredHandler())
	// Registries replay the event log before HTTP serves a single read.
	if err := regs.StartOn(wctx, tail); err != nil {
		return fail(err)
	}
	s.workers.Add(1)
	go func() { defer s.workers.Done(); agents.Run(wctx) }()
	// The push hub follows the event log from its end, before HTTP
	// serves a single stream; the push log hears of the other replicas'
	// pushes from then on.
	if err := hub.StartOn(wctx, tail); err != nil {
		return fail(err)
	}
	s.workers.Add(1)
	go func() { defer s.workers.Done(); pushes.Run(wctx) }()
	s.Ready.Set(ReadyProjections, nil)
	// Webhook delivery, on every replica: each delivers the subscriptions
	// whose leases it holds.
	if cfg.Webhooks.AllowPrivate {
		log.Warn("webhooks may target private and loopback addresses (webhooks.allowPrivate, --allow-private-webhooks): for local development and tests only")
	}
	w := cfg.Webhooks
	schedule := make([]time.Duration, len(w.RetrySchedule))
	for i, d := range w.RetrySchedule {
		schedule[i] = d.D()
	}
	registry := &deliveryRegistry{subs: regs.Subscriptions, events: st.events, subj: subj, submit: surface, now: time.Now}
	dispatcher := webhook.New(webhook.Config{Prefix: cfg.NATS.Prefix,
		Backoff: send.Backoff{Schedule: schedule, Jitter: 0.2, MaxRetryAfter: w.MaxRetryAfter.D()},
		Timeout: w.Timeout.D(), MaxResponseBytes: responseBytes(w.MaxResponseBytes), MaxInFlight: w.MaxInFlight,
		UserAgent: "agentbus-webhooks/" + Version,
	}, webhook.Ports{Events: st.events, Live: tail, DeadLetters: wh.DeadLetters, State: wh.State, Deliveries: wh.Deliveries,
		Subs: registry, Secrets: secretStore, Outcomes: registry,
		Client:   egress.Rules{AllowPrivate: w.AllowPrivate}.Client(w.Timeout.D()),
		Observer: obs.webhooks,
	}, log)
	if s.metrics != nil {
		gauges := metrics.Gauges{NATSConnected: conn.NC.IsConnected, WebhookBacklog: dispatcher.Backlog, MCPSessions: s.MCP.Sessions,
			PushesUnsent: pushes.Dropped}
		if processing {
			gauges.ProcessingBacklog = func(ctx context.Context) (float64, error) {
				c, err := st.commandConsumers.Consumer(ctx, bus.ProcessorConsumer)
				if err != nil {
					return 0, err
				}
				return float64(c.NumPending) + float64(c.NumAckPending), nil
			}
		}
		s.metrics.Watch(gauges)
	}
	s.workers.Add(1)
	go func() { defer s.workers.Done(); dispatcher.Run(wctx) }()

	h := cfg.HTTP
	lim := host.NewConnLimiter(ln, host.MaxConnections(h.MaxConnections, log), h.MaxConnectionsPerAddress, log)
	s.http = &http.Server{
		Handler: tracing.FromHTTP(withGRPC(handler, grpcA2A)), Protocols: protocols(), HTTP2: http2Limits(),
		MaxHeaderBytes: h.HeaderBytes, ConnState: lim.ConnState,
		ReadHeaderTimeout: h.ReadHeaderTimeout.D(), ReadTimeout: h.ReadTimeout.D(),
		WriteTimeout: h.WriteTimeout.D(), IdleTimeout: h.IdleTimeout.D(),
	}
	go func() { s.serveErr <- s.http.Serve(lim) }()
	log.Info("agentbus serving", "http", s.URL, "endpoint", cfg.Endpoint(), "auth", cfg.Auth.Type, "tenancy", cfg.Tenancy.Mode, "nats", natsDescription(conn), "version", Version)
	return nil
}

// ownHosts are the host names a server without authentication answers
// to (rest.Config.Hosts): the public URL's, the listen address's and the
// loopback name; IP addresses are always taken.
func ownHosts(cfg settings.Config) []string {
	hosts := []string{"localhost"}
	if u, err := url.Parse(cfg.Endpoint()); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	if h, _, err := net.SplitHostPort(cfg.Listen); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	return hosts
}

func (s *Server) tenantExists(_ context.Context, t string) bool {
	if s.cfg.Tenancy.Open {
		return true
	}
	for _, k := range s.cfg.Tenancy.Tenants {
		if k == t {
			return true
		}
	}
	return false
}

// payloadHeadroom is what a command's message, and the events it yields,
// add to its body: headers and the event envelope.
const payloadHeadroom = 16 << 10

// bodyLimit is the request body limit: limits.bodyBytes, lowered (and
// logged) where the NATS server's max_payload would not take a command that
// size with its headers, or events of its size — a body under the limit
// must never be answered 202 and then fail to store. (Events a decider
// makes larger than that reject their command with PAYLOAD_TOO_LARGE.)
// A server whose max_payload leaves less than minBody is refused.
func bodyLimit(configured, maxPayload int64, log *slog.Logger) (int64, error) {
	fits := maxPayload - payloadHeadroom
	if maxPayload <= 0 || configured <= fits {
		return configured, nil
	}
	if fits < minBody {
		return 0, fmt.Errorf("the NATS server's max_payload (%d bytes) leaves a command less than %d bytes after %d for headers and events: raise max_payload", maxPayload, minBody, payloadHeadroom)
	}
	log.Info("request body limit lowered to what the NATS server's max_payload leaves a command and its events",
		"bodyBytes", configured, "max_payload", maxPayload, "limit", fits)
	return fits, nil
}

// minBody is the smallest body limit, as limits.bodyBytes allows.
const minBody = 1024

func natsDescription(c *natsjs.Conn) string {
	if c.Embedded() {
		if u := c.ClientURL(); u != "" {
			return "embedded, clients at " + u
		}
		return "embedded, in-process only"
	}
	return "external"
}

// Wait blocks until the HTTP server fails or ctx ends.
func (s *Server) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.serveErr:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

// Stop shuts down gracefully: stop accepting HTTP and finish in-flight
// requests, let consumers finish in-flight messages, drain and flush NATS,
// stop the embedded server.
func (s *Server) Stop(ctx context.Context) error {
	// No reload from here on: one could start workers Stop waits for.
	s.catalog.mu.Lock()
	s.catalog.stopped = true
	s.catalog.mu.Unlock()
	s.endStreams()
	err := s.http.Shutdown(ctx)
	s.cancel()
	done := make(chan struct{})
	go func() { s.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.log.Warn("consumers did not finish in time; unacked messages will be redelivered")
	}
	s.Conn.Close()
	// Followers of the logs still writing find the store closed: what
	// they did not write is read from the logs at the next start.
	return errors.Join(err, s.disk.Close(), s.copyDisk.Close())
}

// stores are the logs, buckets and consumer admins agentbus runs on.
type stores struct {
	commands, events, synthetic      bus.Log
	secrets                          bus.KV
	commandConsumers, eventConsumers bus.ConsumerAdmin

	// queries are the same logs for the reads callers ask for, on
	// connections of their own (natsjs.Conn.QueryLog).
	queries struct{ commands, events, synthetic bus.Log }
}

func openStores(ctx context.Context, conn *natsjs.Conn, names natsjs.Names) (*stores, error) {
	var st stores
	var err error
	if st.commands, err = conn.Log(ctx, names.Commands); err != nil {
		return nil, err
	}
	if st.events, err = conn.Log(ctx, names.Events); err != nil {
		return nil, err
	}
	if st.synthetic, err = conn.Log(ctx, names.Synthetic); err != nil {
		return nil, err
	}
	if st.queries.commands, err = conn.QueryLog(ctx, names.Commands); err != nil {
		return nil, err
	}
	if st.queries.events, err = conn.QueryLog(ctx, names.Events); err != nil {
		return nil, err
	}
	if st.queries.synthetic, err = conn.QueryLog(ctx, names.Synthetic); err != nil {
		return nil, err
	}
	if st.secrets, err = conn.KV(ctx, names.Secrets); err != nil {
		return nil, err
	}
	st.commandConsumers = conn.Consumers(names.Commands)
	st.eventConsumers = conn.Consumers(names.Events)
	return &st, nil
}

// openSecrets opens the subscriptions' secrets store with the configured
// encryption key, or the one it generates and keeps in the bucket — with a
// warning, since whoever reads the bucket can then decrypt the secrets.
func openSecrets(ctx context.Context, kv bus.KV, cfg settings.Subscriptions, log *slog.Logger) (*secrets.Store, error) {
	var key []byte
	if cfg.SecretKey != "" {
		var err error
		if key, err = secrets.ParseKey(cfg.SecretKey.Reveal()); err != nil {
			return nil, fmt.Errorf("subscriptions.secretKey: %w", err)
		}
	}
	st, err := secrets.Open(ctx, kv, secrets.Config{Key: key, Overlap: cfg.RotationOverlap.D()})
	if err != nil {
		return nil, err
	}
	if st.Generated() {
		log.Warn("webhook signing secrets are encrypted with a key agentbus generated and keeps beside them in its secrets bucket: " +
			"whoever can read that bucket can decrypt them. Set subscriptions.secretKey (AGENTBUS_WEBHOOK_SECRET_KEY) to the base64 of 32 random bytes " +
			"(openssl rand -base64 32) and keep it safe (docs/webhooks.md)")
	}
	return st, nil
}

// openWebhooks opens webhook delivery's buckets and dead-letter log
// (streams/60-webhooks.yaml).
func openWebhooks(ctx context.Context, conn *natsjs.Conn, prefix string, log *slog.Logger) (*webhook.Control, error) {
	names := natsjs.NamesFor(prefix)
	state, err := conn.KV(ctx, names.Webhooks)
	if err != nil {
		return nil, err
	}
	records, err := conn.KV(ctx, names.Deliveries)
	if err != nil {
		return nil, err
	}
	dead, err := conn.Log(ctx, names.DeadLetters)
	if err != nil {
		return nil, err
	}
	return &webhook.Control{Prefix: prefix, State: state, DeadLetters: dead, Deliveries: record.NewDeliveries(records, log)}, nil
}

// responseBytes is webhooks.maxResponseBytes as webhook.Config takes it:
// the setting's 0 reads nothing, which the package spells below 0.
func responseBytes(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// dropFormerReceipts removes the receipts bucket and its consumers, which
// versions before the correlation index moved to each replica's disk
// declared: nothing reads them now, and the bucket held a key per recent
// command in the NATS server's memory. What it cannot remove (a NATS user
// without the right) is left, with a warning: agentbus runs without it.
func dropFormerReceipts(ctx context.Context, conn *natsjs.Conn, names natsjs.Names, log *slog.Logger) {
	dropped, err := conn.DropFormer(ctx, natsjs.Former{
		Consumers: map[string][]string{names.Commands: {bus.ReceiptsConsumer}, names.Events: {bus.ReceiptsConsumer}},
		Buckets:   []string{names.Receipts},
	})
	if len(dropped) > 0 {
		log.Info("removed the receipts bucket and consumers of an earlier version: each replica's history on disk is the correlation index", "removed", dropped)
	}
	if err != nil {
		log.Warn("the receipts bucket or consumers of an earlier version could not be removed: nothing uses them; remove them by hand", "err", err)
	}
}
