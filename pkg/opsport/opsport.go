// Package opsport is agentbus's operations listener, apart from the API:
// liveness (GET /healthz), readiness (GET /readyz) and, when asked for,
// the Go profiler (/debug/pprof/). It asks for no credentials, so it
// serves nothing of a tenant's: what an orchestrator or an operator's
// monitoring reads about the process itself.
package opsport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"
)

// Readiness is what GET /readyz reports: named checks, in the order they
// were first named, each ready or not with a reason. It is safe for
// concurrent use.
type Readiness struct {
	mu     sync.Mutex
	checks []*check
}

type check struct {
	name   string
	reason string       // "" when ready; used when probe is nil
	probe  func() error // evaluated on every report when set
}

// NewReadiness returns a Readiness holding names, none ready yet: each
// reason is "pending" until Set or Watch says otherwise.
func NewReadiness(names ...string) *Readiness {
	r := &Readiness{}
	for _, n := range names {
		r.Set(n, errors.New("pending"))
	}
	return r
}

// Set records the state of check name: ready when err is nil, otherwise
// not ready for err's reason. It replaces a probe Watch installed.
func (r *Readiness) Set(name string, err error) {
	reason := ""
	if err != nil {
		reason = err.Error()
		if reason == "" {
			reason = "not ready"
		}
	}
	r.update(name, func(c *check) { c.reason, c.probe = reason, nil })
}

// Watch makes check name ask probe at every report: ready when it returns
// nil. probe must be quick and must not block; it runs under no lock of
// the caller's.
func (r *Readiness) Watch(name string, probe func() error) {
	r.update(name, func(c *check) { c.probe = probe })
}

// ErrUnknown, wrapped in what a polled check returns, says the check
// could not tell this time (its source did not answer): Poll then leaves
// the check as it was.
var ErrUnknown = errors.New("unknown")

// Poll asks check every period until ctx ends, the first time at once,
// and records each answer as Set does: a cached check, for one too slow
// to ask at every report. An answer wrapping ErrUnknown changes nothing.
// Each ask gets a context that ends after period. Poll returns when ctx
// ends; run it in a goroutine of its own.
func (r *Readiness) Poll(ctx context.Context, name string, period time.Duration, check func(context.Context) error) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, period)
		err := check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, ErrUnknown) {
			r.Set(name, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Readiness) update(name string, f func(*check)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.checks {
		if c.name == name {
			f(c)
			return
		}
	}
	c := &check{name: name}
	f(c)
	r.checks = append(r.checks, c)
}

// Check is one check in a Report.
type Check struct {
	Name   string `json:"name"`
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
}

// Report is GET /readyz's body: Ready when every check is.
type Report struct {
	Ready  bool    `json:"ready"`
	Checks []Check `json:"checks"`
}

// Report returns the state of every check now.
func (r *Readiness) Report() Report {
	r.mu.Lock()
	checks := make([]check, len(r.checks))
	for i, c := range r.checks {
		checks[i] = *c
	}
	r.mu.Unlock()
	rep := Report{Ready: true, Checks: make([]Check, 0, len(checks))}
	for _, c := range checks {
		reason := c.reason
		if c.probe != nil {
			reason = ""
			if err := c.probe(); err != nil {
				reason = err.Error()
			}
		}
		rep.Checks = append(rep.Checks, Check{Name: c.name, Ready: reason == "", Reason: reason})
		rep.Ready = rep.Ready && reason == ""
	}
	return rep
}

// Config is the listener's: its address, and whether it serves the Go
// profiler.
type Config struct {
	Listen string
	Pprof  bool
}

// Port is the operations listener. Handle adds a route (such as
// /metrics) before Serve.
type Port struct {
	mux   *http.ServeMux
	ready *Readiness
	ln    net.Listener
	srv   *http.Server
	done  chan error
}

// New returns the operations handler for ready: GET /healthz answers 200
// while the process serves; GET /readyz 200 when every check of ready is
// ready, else 503; both with a JSON body. With cfg.Pprof, /debug/pprof/
// serves the Go profiler.
func New(cfg Config, ready *Readiness) *Port {
	p := &Port{mux: http.NewServeMux(), ready: ready}
	p.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	p.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		rep := ready.Report()
		code := http.StatusOK
		if !rep.Ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, rep)
	})
	if cfg.Pprof {
		p.mux.HandleFunc("/debug/pprof/", pprof.Index)
		p.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		p.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		p.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		p.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return p
}

// Handle adds h at pattern (http.ServeMux's patterns), beside the probes.
func (p *Port) Handle(pattern string, h http.Handler) { p.mux.Handle(pattern, h) }

// Handler returns the routes as one handler.
func (p *Port) Handler() http.Handler { return p.mux }

// Listen binds addr and serves the routes on it until Shutdown. The error
// names the address and the settings that choose it.
func (p *Port) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("ops listen %s: %w; set ops.listen (--ops-listen, AGENTBUS_OPS_LISTEN) to a free address", addr, err)
	}
	p.ln = ln
	p.srv = &http.Server{Handler: p.mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	p.done = make(chan error, 1)
	go func() { p.done <- p.srv.Serve(ln) }()
	return nil
}

// Addr is the address listened on, "" before Listen.
func (p *Port) Addr() string {
	if p.ln == nil {
		return ""
	}
	return p.ln.Addr().String()
}

// Shutdown stops the listener, letting requests in flight finish until ctx
// ends.
func (p *Port) Shutdown(ctx context.Context) error {
	if p.srv == nil {
		return nil
	}
	err := p.srv.Shutdown(ctx)
	<-p.done
	return err
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
