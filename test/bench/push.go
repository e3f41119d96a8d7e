package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
)

// pushP99Target is the target for an event pushed to an MCP
// session on 2 cores.
const pushP99Target = 25 * time.Millisecond

// delays collects event → received delays, from the event's "time" (stamped
// as it is published).
type delays struct {
	mu sync.Mutex
	d  []time.Duration
	n  atomic.Int64
}

func (d *delays) add(data []byte, arrived time.Time) {
	var env struct {
		Time time.Time `json:"time"`
	}
	if json.Unmarshal(data, &env) != nil || env.Time.IsZero() {
		return
	}
	d.mu.Lock()
	d.d = append(d.d, arrived.Sub(env.Time))
	d.mu.Unlock()
	d.n.Add(1)
}

func (d *delays) p(qs ...float64) []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return percentiles(d.d, qs...)
}

// pushStage holds MCP sessions (the Go SDK's client, each having set a
// logging level) and SSE listeners (GET /events as text/event-stream) on
// one agentbus while commands flow through the sessions' typed tool
// (place_order) at a fixed rate, and measures event published → received
// for each, beside a bare core-NATS subscription to the same events in the
// same run; and the heap one idle session costs.
func pushStage(o options, rep *report) error {
	n, listeners, rate, dur := o.pushSessions, o.pushSSE, o.pushRate, o.pushDur
	fmt.Printf("8. Push: %d MCP sessions and %d SSE listeners held while commands flow through the sessions at %.0f/s for %s;\n", n, listeners, rate, dur)
	fmt.Println("   event published → MCP notification / SSE event / core-NATS message received; heap per idle MCP session")
	runtime.GC()
	waitQuiet()
	ab, err := startAgentbus(o.verbose, func(c *settings.Config) {
		c.Push.Streams = max(c.Push.Streams, 2*listeners)
		c.Push.MCP.Sessions = max(c.Push.MCP.Sessions, 2*n)
	})
	if err != nil {
		return err
	}
	defer ab.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mcpD, sseD, natsD delays
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	sessions := make([]*sdk.ClientSession, n)
	for i := range sessions {
		c := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, &sdk.ClientOptions{
			LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
				now := time.Now()
				raw, _ := json.Marshal(r.Params.Data)
				mcpD.add(raw, now)
			},
		})
		cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: ab.URL + "/mcp", MaxRetries: -1}, nil)
		if err != nil {
			return fmt.Errorf("MCP session %d: %w", i, err)
		}
		defer cs.Close()
		if err := cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "info"}); err != nil {
			return err
		}
		sessions[i] = cs
	}
	time.Sleep(500 * time.Millisecond) // each client's event stream (GET) opens
	runtime.GC()
	runtime.ReadMemStats(&after)
	perSession := float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / float64(n)
	fmt.Printf("   %d idle MCP sessions: %.1f KiB of heap each, client and server together (one process); %d goroutines in all\n",
		n, perSession/1024, runtime.NumGoroutine())

	sseClient := &http.Client{Transport: &http.Transport{Proxy: nil, MaxConnsPerHost: 0, MaxIdleConnsPerHost: max(listeners, 1)}}
	var open sync.WaitGroup
	for range listeners {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ab.URL+"/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		res, err := sseClient.Do(req)
		if err != nil {
			return fmt.Errorf("SSE listener: %w", err)
		}
		if res.StatusCode != http.StatusOK {
			res.Body.Close()
			return fmt.Errorf("SSE listener: %d", res.StatusCode)
		}
		open.Add(1)
		go func() {
			defer open.Done()
			defer res.Body.Close()
			sc := bufio.NewScanner(res.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					sseD.add([]byte(data), time.Now())
				}
			}
		}()
	}
	sub, err := ab.Conn.NC.Subscribe("agentbus.evt.>", func(m *nats.Msg) { natsD.add(m.Data, time.Now()) })
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	defer sub.Unsubscribe()

	total := int(rate * dur.Seconds())
	tag := fmt.Sprintf("push-%d", time.Now().UnixNano())
	var failed atomic.Int64
	var firstErr atomic.Value
	sem := make(chan struct{}, 128)
	var calls sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	start := time.Now()
	for i := range total {
		<-tick.C
		sem <- struct{}{}
		calls.Add(1)
		go func() {
			defer calls.Done()
			defer func() { <-sem }()
			res, err := sessions[i%n].CallTool(ctx, &sdk.CallToolParams{Name: "place_order", Arguments: map[string]any{
				"orderId": fmt.Sprintf("%s-%d", tag, i), "customer": "ada", "currency": "EUR",
				"items": []any{map[string]any{"sku": "A-1", "quantity": 1}}}})
			if err == nil && res.IsError {
				raw, _ := json.Marshal(res.StructuredContent)
				err = fmt.Errorf("%s", raw)
			}
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		}()
	}
	tick.Stop()
	calls.Wait()
	sent := time.Since(start)
	deadline := time.Now().Add(10 * time.Second)
	want := int64(total) - failed.Load()
	for time.Now().Before(deadline) && (mcpD.n.Load() < want || sseD.n.Load() < want*int64(listeners) || natsD.n.Load() < want) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	open.Wait()
	if f := failed.Load(); f > 0 {
		fmt.Printf("  !! %d tool calls failed, first: %v\n", f, firstErr.Load())
	}
	m, s, c := mcpD.p(0.5, 0.99), sseD.p(0.5, 0.99), natsD.p(0.5, 0.99)
	fmt.Printf("   %d commands sent in %s (%d failed); received: MCP %d of %d, SSE %d of %d, core NATS %d of %d\n",
		total, sent.Round(time.Millisecond), failed.Load(), mcpD.n.Load(), want, sseD.n.Load(), want*int64(listeners), natsD.n.Load(), want)
	fmt.Printf("   event → received: MCP p50 %.1f ms p99 %.1f ms; SSE p50 %.1f ms p99 %.1f ms; core-NATS subscriber p50 %.1f ms p99 %.1f ms\n\n",
		ms(m[0]), ms(m[1]), ms(s[0]), ms(s[1]), ms(c[0]), ms(c[1]))
	if l := ab.logs(); l != "none" {
		fmt.Printf("  agentbus warnings during the push stage: %s\n", l)
	}
	rep.add("push.mcp_p50", ms(m[0]), "ms")
	rep.add("push.mcp_p99", ms(m[1]), "ms")
	rep.add("push.sse_p50", ms(s[0]), "ms")
	rep.add("push.sse_p99", ms(s[1]), "ms")
	rep.add("push.nats_p50", ms(c[0]), "ms")
	rep.add("push.nats_p99", ms(c[1]), "ms")
	rep.add("push.mcp_session_heap", perSession/1024, "KiB")
	rep.row(fmt.Sprintf("MCP push p99 at %.0f/s, %d sessions + %d SSE (ms)", rate, n, listeners), fmt.Sprintf("%.1f", ms(m[1])),
		fmt.Sprintf("<= %.0f", ms(pushP99Target)), verdict(m[1] <= pushP99Target && mcpD.n.Load() >= want))
	rep.row("  SSE / core-NATS subscriber p99 (ms)", fmt.Sprintf("%.1f / %.1f", ms(s[1]), ms(c[1])), "", "")
	rep.row("heap per idle MCP session (KiB, client + server)", fmt.Sprintf("%.1f", perSession/1024), "", "")
	return nil
}
