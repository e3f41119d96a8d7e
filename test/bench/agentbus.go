package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	natsserver "github.com/nats-io/nats-server/v2/server"
)

// abServer is agentbus started in-process like test/e2e's harness: a fresh
// embedded nats-server (file storage, temp dir, no client port) and HTTP on
// a loopback port.
type abServer struct {
	*server.Server
	dir    string
	warns  *countingHandler
	ext    *natsserver.Server // agentbus on an external server over TCP
	extDir string
	proxy  *delayProxy // between agentbus and ext, when asked
}

// startAgentbus starts agentbus, retrying once: a start has been seen to
// fail now and then on this shared machine ("error creating store for
// stream") while other test suites ran.
func startAgentbus(verbose bool, mutate ...func(*settings.Config)) (*abServer, error) {
	a, err := startAgentbusOnce(verbose, mutate...)
	if err != nil {
		fmt.Printf("   (agentbus did not start: %v; retrying once)\n", err)
		time.Sleep(time.Second)
		a, err = startAgentbusOnce(verbose, mutate...)
	}
	return a, err
}

func startAgentbusOnce(verbose bool, mutate ...func(*settings.Config)) (*abServer, error) {
	dir, err := os.MkdirTemp("", "agentbus-bench-")
	if err != nil {
		return nil, err
	}
	cfg := settings.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Data = dir
	none := ""
	cfg.NATS.Listen = &none
	cfg.Log.Level = "warn"
	for _, m := range mutate {
		m(&cfg)
	}
	h := &countingHandler{counts: map[string]int{}, verbose: verbose}
	s, err := server.Start(context.Background(), cfg, slog.New(h))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start agentbus: %w", err)
	}
	return &abServer{Server: s, dir: dir, warns: h}, nil
}

// startAgentbusTCP is a diagnostic variant: the same embedded-style
// nats-server, but listening on loopback TCP and given to agentbus as an
// external server (cfg.NATS.URL), so agentbus talks to it over a socket
// instead of the in-process net.Pipe.
func startAgentbusTCP(verbose bool, mutate ...func(*settings.Config)) (*abServer, error) {
	return startAgentbusDelayed(verbose, 0, mutate...)
}

// startAgentbusDelayed is startAgentbusTCP with a delayProxy between
// agentbus and the server adding oneWay to each direction of every
// connection agentbus opens (none when oneWay is 0). The bench's observer
// connects to the server directly.
func startAgentbusDelayed(verbose bool, oneWay time.Duration, mutate ...func(*settings.Config)) (*abServer, error) {
	dir, err := os.MkdirTemp("", "agentbus-bench-ext-")
	if err != nil {
		return nil, err
	}
	ns, err := natsserver.NewServer(&natsserver.Options{
		ServerName: "bench-external", JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
		Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, JetStreamMaxMemory: 256 << 20, MaxPayload: 8 << 20,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go ns.Start()
	stopServer := func() {
		ns.Shutdown()
		ns.WaitForShutdown()
		os.RemoveAll(dir)
	}
	if !ns.ReadyForConnections(30 * time.Second) {
		stopServer()
		return nil, fmt.Errorf("external nats-server not ready")
	}
	url := ns.ClientURL()
	var proxy *delayProxy
	if oneWay > 0 {
		addr := ns.Addr().String()
		if proxy, err = startDelayProxy(addr, oneWay); err != nil {
			stopServer()
			return nil, err
		}
		url = "nats://" + proxy.Addr()
	}
	a, err := startAgentbus(verbose, append(mutate, func(c *settings.Config) { c.NATS.URL = url })...)
	if err != nil {
		if proxy != nil {
			proxy.Close()
		}
		stopServer()
		return nil, err
	}
	a.ext, a.extDir, a.proxy = ns, dir, proxy
	return a, nil
}

func (a *abServer) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = a.Server.Stop(ctx)
	if a.proxy != nil {
		a.proxy.Close()
	}
	if a.ext != nil {
		a.ext.Shutdown()
		a.ext.WaitForShutdown()
		os.RemoveAll(a.extDir)
	}
	if err := os.RemoveAll(a.dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench: remove", a.dir, err)
	}
}

// countingHandler counts agentbus's warnings and errors by message so a run
// can say whether anything went wrong under load; -v also prints them.
type countingHandler struct {
	mu      sync.Mutex
	counts  map[string]int
	verbose bool
}

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.counts[r.Level.String()+" "+r.Message]++
	h.mu.Unlock()
	if h.verbose {
		var b strings.Builder
		r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
		fmt.Fprintf(os.Stderr, "agentbus %s %s%s\n", r.Level, r.Message, b.String())
	}
	return nil
}
func (h *countingHandler) WithAttrs(as []slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler         { return h }

// Summary is "none" or "N× level message; ...".
func (h *countingHandler) Summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.counts) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range h.counts {
		parts = append(parts, fmt.Sprintf("%d× %s", v, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
