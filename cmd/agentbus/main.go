// Command agentbus runs the agentbus service and its admin tasks.
//
//	agentbus serve          run the service (embedded NATS by default)
//	agentbus streams apply  create or update the streams and buckets (serve applies the consumers)
//	agentbus keys ...       create, list and revoke API keys
//	agentbus backup, restore
//	                        snapshot every stream to a directory; restore it
//	agentbus send, events, trace, agents, services, subscriptions
//	                        reach a running agentbus over its API
//	agentbus config check   check a configuration without serving
//	agentbus version        print the version, commit and Go version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/opsport"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/server/host"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/agentbus/agentbus/streams"
)

const usage = `usage: agentbus <command> [flags]

commands:
  serve          run agentbus (HTTP on 127.0.0.1:8080, embedded NATS unless --nats-url)
  streams apply  create or update the streams and buckets in streams/ (consumers: by serve)
  keys create    create an API key (printed once): --tenant t1 --scope read,write [--description ..] [--ttl 720h]
  keys list      list API keys (ids, tenants, scopes, state; never secrets)
  keys revoke    revoke an API key on every replica: keys revoke <id>
  backup         snapshot every stream and bucket into a directory: backup --out DIR
  restore        restore a backup, agentbus stopped: restore --in DIR [--force]
  send           send a command over the API: send TYPE --data @file.json|-|'{...}' [--wait]
  events         page or follow the event log: events [--type T]... [--correlation ID] [--follow]
  trace          print a command's story: trace <correlation id>
  agents         agents list|get|register|pause|resume|delete
  services       services list|get|register|delete
  subscriptions  webhooks: list|get|create|enable|disable|delete|deliveries|secret|rotate-secret|redeliver|replay
  config check   check a configuration without serving; print it, secrets masked
  version        print the version, commit and Go version

Run 'agentbus <command> -h' for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp): // -h: the flag set printed the usage
	case err != nil:
		fmt.Fprintln(os.Stderr, "agentbus:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "streams":
		switch {
		case len(args) > 1 && args[1] == "apply":
			return streamsApply(ctx, args[2:], stdout, stderr)
		case len(args) > 1 && isHelp(args[1]):
			fmt.Fprintln(stdout, streamsSynopsis+"\n\nRun 'agentbus streams apply -h' for its flags.")
			return nil
		}
		return errors.New("usage: agentbus streams apply [flags]")
	case "keys":
		return keys(ctx, args[1:], stdout, stderr)
	case "backup":
		return backup(ctx, args[1:], stdout, stderr)
	case "restore":
		return restore(ctx, args[1:], stdout, stderr)
	case "send":
		return send(ctx, args[1:], stdout, stderr)
	case "events":
		return events(ctx, args[1:], stdout, stderr)
	case "trace":
		return trace(ctx, args[1:], stdout, stderr)
	case "agents":
		return registry(ctx, "agents", agentsUsage, agentsCmds, args[1:], stdout, stderr)
	case "services":
		return registry(ctx, "services", servicesUsage, servicesCmds, args[1:], stdout, stderr)
	case "subscriptions":
		return registry(ctx, "subscriptions", subscriptionsUsage, subscriptionsCmds, args[1:], stdout, stderr)
	case "config":
		return configCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-v":
		if len(args) > 1 && isHelp(args[1]) {
			fmt.Fprintln(stdout, "usage: agentbus version\n\nPrints the version of this binary, the commit it was built from and the Go version that built it.")
			return nil
		}
		printVersion(stdout, readBuild())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

// newFlags returns the flag set of the command name ("keys create"):
// -h prints synopsis, then every flag the set holds.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("agentbus "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// adminSettings are the configuration flags of the admin commands (keys,
// streams apply): where the store is and how to reach NATS.
var adminSettings = []string{"config", "data", "nats-url", "nats-listen", "log-format"}

// loadConfig adds to fs the configuration flags named in names (every
// one when none is named), parses args with fs and returns the
// configuration: flags over env over the config file over defaults. Env
// variables apply whether or not their flag is in names. It returns
// flag.ErrHelp after -h, and an error for an argument left after the flags.
func loadConfig(fs *flag.FlagSet, args []string, names ...string) (settings.Config, error) {
	cfg := settings.Default()
	takes := func(name string) bool { return len(names) == 0 || slices.Contains(names, name) }
	str := func(name, usage string) *string {
		if !takes(name) {
			return new(string)
		}
		return fs.String(name, "", usage)
	}
	boolean := func(name, usage string) *bool {
		if !takes(name) {
			return new(bool)
		}
		return fs.Bool(name, false, usage)
	}
	// onByDefault is a switch that is on unless set: it applies only when
	// given (fs.Visit), so it overrides env and the file either way.
	onByDefault := func(name, usage string) *bool {
		if !takes(name) {
			return new(bool)
		}
		return fs.Bool(name, true, usage)
	}
	var (
		file       = str("config", "config file (YAML) [AGENTBUS_CONFIG]")
		listen     = str("listen", "HTTP listen address, default 127.0.0.1:8080 [AGENTBUS_LISTEN]")
		opsListen  = str("ops-listen", "operations listener (GET /healthz, /readyz, /metrics; no credentials), default 127.0.0.1:8081 [AGENTBUS_OPS_LISTEN]")
		opsMetrics = onByDefault("ops-metrics", "keep metrics and serve them at /metrics on the operations listener; --ops-metrics=false keeps none [AGENTBUS_OPS_METRICS]")
		data       = str("data", "data directory: the embedded NATS store, and the replica's read models (index), default ./data [AGENTBUS_DATA]")
		natsURL    = str("nats-url", "external NATS server URL(s); empty runs embedded NATS [AGENTBUS_NATS_URL]")
		natsListen = str("nats-listen", "embedded NATS client address for internal services (credentials required when --auth is on: nats.embedded.users), default 127.0.0.1:4222; \"\" for in-process only [AGENTBUS_NATS_LISTEN]")
		publicURL  = str("public-url", "public base URL announced as rest.endpoint [AGENTBUS_PUBLIC_URL]")
		tenancy    = str("tenancy", "single or multi [AGENTBUS_TENANCY]")
		tenants    = str("tenants", "comma-separated tenant ids known in multi mode [AGENTBUS_TENANTS]")
		openTen    = boolean("open-tenants", "multi mode: accept any valid tenant id without listing it [AGENTBUS_OPEN_TENANTS=true]")
		authType   = str("auth", "none, bearer, apikey-header or apikey-query; default none (loopback only) [AGENTBUS_AUTH]")
		inject     = boolean("allow-event-injection", "allow POST /events (synthetic events, admin scope) [AGENTBUS_ALLOW_EVENT_INJECTION=true]")
		insecure   = boolean("allow-insecure-listen", "allow a non-loopback listen address without authentication [AGENTBUS_ALLOW_INSECURE_LISTEN=true]")
		private    = boolean("allow-private-webhooks", "let webhook URLs target loopback and private addresses: local development and tests only [AGENTBUS_ALLOW_PRIVATE_WEBHOOKS=true]")
		noConsole  = boolean("no-console", "do not serve the web console at /console/ [AGENTBUS_CONSOLE=false]")
		logFormat  = str("log-format", "text or json [AGENTBUS_LOG_FORMAT]")
		memMode    = str("memory-mode", "budget (default) or large-heap [AGENTBUS_MEMORY_MODE]")
		memBudget  = str("memory-budget", "memory budget, e.g. 384MiB or 2GiB; default that of the mode [AGENTBUS_MEMORY_BUDGET]")
	)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *file == "" {
		*file = os.Getenv("AGENTBUS_CONFIG")
	}
	if *file != "" {
		if err := cfg.LoadFile(*file); err != nil {
			return cfg, err
		}
	}
	set(&cfg.Listen, *listen, "AGENTBUS_LISTEN")
	set(&cfg.Ops.Listen, *opsListen, "AGENTBUS_OPS_LISTEN")
	if err := setBool(&cfg.Ops.Metrics, false, "AGENTBUS_OPS_METRICS"); err != nil {
		return cfg, err
	}
	set(&cfg.Data, *data, "AGENTBUS_DATA")
	set(&cfg.NATS.URL, *natsURL, "AGENTBUS_NATS_URL")
	set(&cfg.PublicURL, *publicURL, "AGENTBUS_PUBLIC_URL")
	set(&cfg.Tenancy.Mode, *tenancy, "AGENTBUS_TENANCY")
	if err := applyAuthFlags(&cfg, authFlags{auth: *authType, tenants: *tenants, openTenants: *openTen, inject: *inject, insecure: *insecure}); err != nil {
		return cfg, err
	}
	if err := setBool(&cfg.Webhooks.AllowPrivate, *private, "AGENTBUS_ALLOW_PRIVATE_WEBHOOKS"); err != nil {
		return cfg, err
	}
	if err := setBool(&cfg.Console.Enabled, false, "AGENTBUS_CONSOLE"); err != nil {
		return cfg, err
	}
	if *noConsole {
		cfg.Console.Enabled = false
	}
	set(&cfg.Log.Format, *logFormat, "AGENTBUS_LOG_FORMAT")
	set(&cfg.Memory.Mode, *memMode, "AGENTBUS_MEMORY_MODE")
	var budget string
	if set(&budget, *memBudget, "AGENTBUS_MEMORY_BUDGET") {
		b, err := settings.ParseSize(budget)
		if err != nil {
			return cfg, fmt.Errorf("memory budget (--memory-budget, AGENTBUS_MEMORY_BUDGET): %w", err)
		}
		cfg.Memory.Budget = b
	}
	applySubscriptionEnv(&cfg)
	if v, ok := os.LookupEnv("AGENTBUS_NATS_LISTEN"); ok {
		cfg.NATS.Listen = &v
	}
	fs.Visit(func(f *flag.Flag) { // given, even as "": that is a value here
		switch f.Name {
		case "nats-listen":
			v := *natsListen
			cfg.NATS.Listen = &v
		case "ops-metrics":
			cfg.Ops.Metrics = *opsMetrics
		}
	})
	return cfg, cfg.Validate()
}

// set applies a string setting: the environment variable env over what dst
// holds (the config file), a non-empty flag over env. It reports whether
// either was given.
func set(dst *string, flagVal, env string) bool {
	v, ok := os.LookupEnv(env)
	if ok {
		*dst = v
	}
	if flagVal != "" {
		*dst = flagVal
	}
	return ok || flagVal != ""
}

// setBool applies a boolean switch: env (anything strconv.ParseBool takes)
// over what dst holds, a flag that is on over env. An unreadable value is
// an error naming the variable.
func setBool(dst *bool, flagVal bool, env string) error {
	if v, ok := os.LookupEnv(env); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s=%q is not a boolean (use true or false)", env, v)
		}
		*dst = b
	}
	if flagVal {
		*dst = true
	}
	return nil
}

func newLogger(cfg settings.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serveSynopsis heads serve -h.
const serveSynopsis = `usage: agentbus serve [flags]

Runs agentbus: HTTP on 127.0.0.1:8080, an embedded NATS server storing in
./data unless --nats-url. Flags override AGENTBUS_* variables, which override
the config file (--config), which overrides the defaults. SIGHUP reloads the
catalogue (catalog.dirs); so does catalog.reload, a poll, when set.`

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := loadConfig(newFlags("serve", serveSynopsis, stderr), args)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	log.Info("memory", "plan", host.TuneRuntime(cfg.Memory, log)) // the long-running command only
	// SIGHUP reloads the catalogue; caught from the start, so that one
	// sent while agentbus starts does not end it.
	hup, stopHangup := watchHangup()
	defer stopHangup()
	traced, endTracing, err := tracing.Setup(ctx, server.Version)
	if err != nil {
		return err
	}
	if traced {
		log.Info("tracing on: spans are exported over OTLP (OTEL_* environment variables)")
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := endTracing(fctx); err != nil {
			log.Warn("flushing the last spans failed", "err", err)
		}
	}()
	// The operations listener serves from the start: live, and not ready
	// until agentbus is, however long NATS takes.
	ready := server.NewReadiness()
	port := opsport.New(opsport.Config{Listen: cfg.Ops.Listen, Pprof: cfg.Ops.Pprof}, ready)
	if err := port.Listen(cfg.Ops.Listen); err != nil {
		return err
	}
	log.Info("operations listener", "http", "http://"+port.Addr(), "pprof", cfg.Ops.Pprof, "metrics", cfg.Ops.Metrics)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = port.Shutdown(sctx)
	}()
	s, err := server.StartWaiting(ctx, cfg, log, ready)
	if err != nil {
		if ctx.Err() != nil { // stopped while waiting for NATS
			log.Info("stopped before serving")
			return nil
		}
		return err
	}
	port.Handle("GET /metrics", s.Metrics())
	fctx, endFollow := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() { defer close(followed); followCatalog(fctx, s, hup, cfg.Catalog.Reload.D()) }()
	werr := s.Wait(ctx)
	endFollow()
	<-followed
	ready.Set("shutdown", errors.New("agentbus is shutting down"))
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout.D())
	defer cancel()
	if err := s.Stop(sctx); err != nil && werr == nil {
		werr = err
	}
	log.Info("stopped")
	return werr
}

// streamsSynopsis heads streams apply -h.
const streamsSynopsis = `usage: agentbus streams apply [flags]

Creates or updates the streams and buckets of streams/ (serve applies the
consumers, whose filters depend on the catalogue). It reaches NATS like the
keys commands: --nats-url, or a running agentbus's embedded server on
nats.listen, or else the embedded store in --data.`

func streamsApply(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(newFlags("streams apply", streamsSynopsis, stderr), args, adminSettings...)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := connectAdmin(cctx, cfg, "agentbus-streams", log)
	if err != nil {
		return err
	}
	defer conn.Close()
	stores, err := applyStores(cctx, conn, cfg, nil)
	if err != nil {
		return err
	}
	for _, sp := range stores {
		fmt.Fprintf(stdout, "applied %s %s (%s)\n", sp.Kind, sp.Name, sp.File)
	}
	fmt.Fprintln(stdout, "consumers are applied by agentbus serve, whose processor filter depends on the catalogue")
	return nil
}

// connectAdmin connects an admin command (keys, streams apply) to NATS as
// serve would, trying once: --nats-url; else the embedded server of a
// running agentbus, as its administrator when the data dir holds the
// credential serve writes there (natsjs.AdminFile), or on nats.listen
// when its client port needs none; else the embedded store in --data
// (refused while another process holds it), without a client port. A
// server on nats.listen that is not agentbus's embedded one is refused:
// it is reached only with --nats-url.
func connectAdmin(ctx context.Context, cfg settings.Config, name string, log *slog.Logger) (*natsjs.Conn, error) {
	nc := server.NATSConfig(cfg)
	nc.Listen = ""
	nc.Users = nil // no client port: internal services have nothing to reach
	nc.Name = name
	if nc.URL != "" {
		return natsjs.Connect(ctx, nc, log)
	}
	admin, ok, err := natsjs.AdminAccess(cfg.Data)
	if err != nil {
		return nil, err
	}
	if ok {
		running := nc
		running.URL, running.User, running.Password = admin.URL, admin.User, admin.Password
		conn, err := natsjs.Connect(ctx, running, log)
		if err == nil {
			return runningAgentbus(conn, admin.URL, log)
		}
		log.Debug("the admin credential in the data dir is not accepted (left by an agentbus that did not stop cleanly?)", "err", err)
	}
	if cfg.EmbeddedListen() != "" {
		running := nc
		running.URL = "nats://" + cfg.EmbeddedListen()
		conn, err := natsjs.Connect(ctx, running, log)
		if errors.Is(err, natsjs.ErrCredentialsRefused) {
			return nil, fmt.Errorf("the NATS server on nats.listen %s requires credentials: an admin command reaches a running agentbus "+
				"with the ones serve writes to %s; run it with serve's --data, as the user serve runs as",
				cfg.EmbeddedListen(), filepath.Join(cfg.Data, natsjs.AdminFile))
		}
		if err != nil {
			log.Debug("no running agentbus on nats.listen; opening the embedded store", "err", err)
			return natsjs.Connect(ctx, nc, log)
		}
		return runningAgentbus(conn, cfg.EmbeddedListen(), log)
	}
	return natsjs.Connect(ctx, nc, log)
}

// runningAgentbus returns conn, to the server at addr, if that server is
// a running agentbus's embedded one; otherwise it closes conn and refuses.
func runningAgentbus(conn *natsjs.Conn, addr string, log *slog.Logger) (*natsjs.Conn, error) {
	if got := conn.NC.ConnectedServerName(); got != natsjs.EmbeddedServerName {
		conn.Close()
		return nil, fmt.Errorf("the NATS server at %s is %q, not a running agentbus's; pass --nats-url to use it, or --nats-listen \"\" to open --data", addr, got)
	}
	log.Info("using the NATS server of the running agentbus", "addr", addr)
	return conn, nil
}

// applyStores checks that conn's server can run agentbus, then creates or
// updates the streams and buckets of streams/ that keep selects (nil: all
// of them) and returns them. Consumers are serve's: their filters come
// from the catalogue.
func applyStores(ctx context.Context, conn *natsjs.Conn, cfg settings.Config, keep func(natsjs.Spec) bool) ([]natsjs.Spec, error) {
	if err := conn.Check(ctx, cfg.NATS.Prefix); err != nil {
		return nil, err
	}
	specs, err := natsjs.LoadSpecs(streams.Files, server.StreamSettings(cfg))
	if err != nil {
		return nil, err
	}
	var want []natsjs.Spec
	for _, sp := range specs {
		if sp.Kind != "consumer" && (keep == nil || keep(sp)) {
			want = append(want, sp)
		}
	}
	return want, conn.Apply(ctx, want, nil)
}
