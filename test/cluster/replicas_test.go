// The agentbus replicas and the callers submitting commands to them.

package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
	agentbus "github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// logSink keeps agentbus's log lines (info and above, but the start-up
// line) for the report, and prints them too when AGENTBUS_TEST_LOG is set.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

type sinkHandler struct {
	slog.Handler
	sink    *logSink
	replica string
	buf     *bytes.Buffer
	mu      *sync.Mutex
}

func newLogger(sink *logSink, replica string) *slog.Logger {
	h := &sinkHandler{sink: sink, replica: replica, buf: &bytes.Buffer{}, mu: &sync.Mutex{}}
	h.Handler = slog.NewTextHandler(h.buf, &slog.HandlerOptions{Level: slog.LevelInfo})
	return slog.New(h)
}

func (h *sinkHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	if err := h.Handler.Handle(ctx, r); err != nil {
		return err
	}
	line := h.replica + ": " + strings.TrimSpace(h.buf.String())
	if r.Message == "agentbus serving" {
		return nil
	}
	h.sink.mu.Lock()
	h.sink.lines = append(h.sink.lines, line)
	h.sink.mu.Unlock()
	if verbose {
		fmt.Fprintln(os.Stderr, line)
	}
	return nil
}

func (h *sinkHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &sinkHandler{Handler: h.Handler.WithAttrs(as), sink: h.sink, replica: h.replica, buf: h.buf, mu: h.mu}
}

func (h *sinkHandler) WithGroup(g string) slog.Handler {
	return &sinkHandler{Handler: h.Handler.WithGroup(g), sink: h.sink, replica: h.replica, buf: h.buf, mu: h.mu}
}

func (s *logSink) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// startAgentbus starts a replica on the cluster at natsURL, logging into
// sink as name.
func startAgentbus(t *testing.T, natsURL string, sink *logSink, name string) *agentbus.Server {
	t.Helper()
	return testkit.AgentbusWithLogger(t, newLogger(sink, name), testkit.NoNATSPort, func(c *settings.Config) {
		c.NATS.URL = natsURL
		c.NATS.Replicas = 3
	})
}

// ---------------------------------------------------------------------------
// Submitting commands and recording what happened.

var httpClient = &http.Client{Timeout: 15 * time.Second}

// attempt is one POST /commands of an envelope.
type attempt struct {
	replica int
	at      time.Time
	dur     time.Duration
	status  int    // 0 when the request itself failed
	err     string // transport error
	body    string
	specErr bool // the body is the spec's error body
	code    string
	retry   string // Retry-After of an error
}

func (a attempt) String() string {
	if a.status == 0 {
		return fmt.Sprintf("replica %d after %s: transport error: %s", a.replica, a.dur.Round(time.Millisecond), a.err)
	}
	ra := ""
	if a.status != http.StatusAccepted {
		ra = fmt.Sprintf(" (Retry-After %q)", a.retry)
	}
	return fmt.Sprintf("replica %d after %s: %d%s %s", a.replica, a.dur.Round(time.Millisecond), a.status, ra, a.body)
}

// command is one envelope, retried until accepted.
type command struct {
	env      map[string]any
	orderID  string
	corr     string // expected correlation id
	phase    string
	attempts []attempt
	accepted bool
	gotID    string
}

var seq atomic.Int64

func newCommand(phase string) *command {
	n := seq.Add(1)
	orderID := fmt.Sprintf("o-%s-%d", phase, n)
	id := fmt.Sprintf("cmd-%d-%d", time.Now().UnixNano(), n)
	env := map[string]any{
		"specversion": "1.0", "id": id, "source": source, "type": "PlaceOrder",
		"datacontenttype": "application/json", "dataschema": "place-order/1.0",
		"time": time.Now().UTC().Format(time.RFC3339),
		"data": map[string]any{
			"orderId": orderID, "customer": "ada", "items": []any{map[string]any{"sku": "A-1", "quantity": 2}},
		},
	}
	return &command{env: env, orderID: orderID, corr: envelope.CorrelationID("default", source, id), phase: phase}
}

// post sends the envelope once to replica i.
func post(base string, replica int, body []byte) attempt {
	a := attempt{replica: replica, at: time.Now()}
	res, err := httpClient.Post(base+"/commands", "application/json", bytes.NewReader(body))
	if err != nil {
		a.dur = time.Since(a.at)
		a.err = err.Error()
		return a
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	a.dur = time.Since(a.at)
	a.status = res.StatusCode
	a.retry = res.Header.Get("Retry-After")
	a.body = strings.TrimSpace(string(b))
	a.code, a.specErr = errorCode(b)
	return a
}

// errorCode parses the spec's error body {"error": {code, message, details}}.
func errorCode(b []byte) (string, bool) {
	var top map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil || len(top) != 1 || top["error"] == nil {
		return "", false
	}
	var e struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	}
	raw, _ := json.Marshal(top["error"])
	if json.Unmarshal(raw, &e) != nil || e.Code == "" || e.Message == "" || e.Details == nil {
		return e.Code, false
	}
	return e.Code, true
}

// submit retries the same envelope, alternating replicas as a load
// balancer would, until a 202 or acceptWindow passes.
func submit(bases []string, c *command, first int) {
	body, _ := json.Marshal(c.env)
	deadline := time.Now().Add(acceptWindow)
	backoff := 50 * time.Millisecond
	for i := 0; ; i++ {
		r := (first + i) % len(bases)
		a := post(bases[r], r, body)
		c.attempts = append(c.attempts, a)
		if a.status == http.StatusAccepted {
			var ok struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal([]byte(a.body), &ok)
			c.accepted, c.gotID = true, ok.ID
			return
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(backoff)
		if backoff < 500*time.Millisecond {
			backoff *= 2
		}
	}
}

// ledger collects every command submitted.
type ledger struct {
	mu   sync.Mutex
	cmds []*command
	rr   atomic.Int64
}

func (l *ledger) run(bases []string, phase string) *command {
	c := newCommand(phase)
	submit(bases, c, int(l.rr.Add(1))%len(bases))
	l.mu.Lock()
	l.cmds = append(l.cmds, c)
	l.mu.Unlock()
	return c
}

func (l *ledger) all() []*command {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*command(nil), l.cmds...)
}
