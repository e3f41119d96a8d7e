package interop_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
)

const a2aScript = "a2a-client.mjs"

// jsView is what the script reports of a task.
type jsView struct {
	ID         string `json:"id"`
	State      string `json:"state"`
	Artifacts  []any  `json:"artifacts"`
	StatusText string `json:"statusText"`
}

type jsReport struct {
	Error      string  `json:"error"`
	CardStatus int     `json:"cardStatus"`
	Anonymous  string  `json:"anonymous"`
	SentKind   string  `json:"sentKind"`
	Submitted  *jsView `json:"submitted"`
	Streamed   *struct {
		jsView
		Events []string `json:"events"`
	} `json:"streamed"`
	Rejected *jsView `json:"rejected"`
	Task     *jsView `json:"task"`
}

// runA2AScript runs the @a2a-js/sdk script on job and returns its report,
// failing t when it cannot run or reports an error.
func runA2AScript(t *testing.T, job map[string]any) *jsReport {
	t.Helper()
	node := requireNode(t)
	for _, pkg := range []string{"node_modules/@a2a-js/sdk/package.json", "node_modules/a2a-js-sdk-03/package.json"} {
		if _, err := os.Stat(pkg); err != nil {
			t.Fatalf("test/interop/node_modules lacks %s: %s", pkg, installAdvice)
		}
	}
	in, _ := json.Marshal(job)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, a2aScript)
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", a2aScript, err, errb.String())
	}
	if os.Getenv("A2A_DEBUG") != "" {
		t.Logf("stderr: %s", errb.String())
	}
	var r jsReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%s printed %q: %v\n%s", a2aScript, out.String(), err, errb.String())
	}
	if os.Getenv("A2A_DEBUG") != "" {
		t.Logf("%s", out.String())
	}
	if r.Error != "" {
		t.Fatalf("%s (sdk %v) failed: %s", a2aScript, job["sdk"], r.Error)
	}
	return &r
}

// TestA2AJavaScriptClients: @a2a-js/sdk 1.x and 0.3.x, with their default
// client factory options, fetch the card without credentials, are
// refused without them, send a command (a task, completed, its artifacts
// the events of GET /events?correlationId=), stream one (the task, its
// artifacts, completed), see a rejected command fail its task, and read
// a task back from another agentbus on the same NATS after the first
// stopped.
func TestA2AJavaScriptClients(t *testing.T) {
	t.Parallel()
	url := testkit.NATSServer(t)
	ext := func(c *settings.Config) { c.NATS.URL = url }
	first := a2aServer(t, ext)
	tasks := map[string]string{}
	for _, sdk := range []string{"1", "0.3"} {
		t.Run("sdk "+sdk, func(t *testing.T) {
			orderID := "js-" + strings.ReplaceAll(sdk, ".", "") + "-" + uuid.NewString()[:8]
			r := runA2AScript(t, map[string]any{"sdk": sdk, "base": first.URL, "key": a2aBootstrap, "mode": "flow",
				"submit": order(orderID), "stream": order(orderID + "-s"), "reject": order(orderID)})
			if r.CardStatus != 200 {
				t.Fatalf("card without credentials: %d", r.CardStatus)
			}
			if r.Anonymous == "accepted" || !strings.Contains(r.Anonymous, "401") {
				t.Fatalf("a call without credentials: %q, want refused with 401", r.Anonymous)
			}
			if r.SentKind != "task" || r.Submitted.State != "completed" {
				t.Fatalf("sent command: %s in state %s, want a completed task", r.SentKind, r.Submitted.State)
			}
			sameJSON(t, "artifacts vs GET /events?correlationId=", r.Submitted.Artifacts, restEvents(t, first.URL, a2aBootstrap, r.Submitted.ID))
			if s := r.Streamed; s == nil || s.State != "completed" || len(s.Events) == 0 || s.Events[0] != "task" {
				t.Fatalf("streamed command: %+v, want the task first and completed last", r.Streamed)
			}
			sameJSON(t, "streamed artifacts vs GET /events?correlationId=", r.Streamed.Artifacts, restEvents(t, first.URL, a2aBootstrap, r.Streamed.ID))
			if r.Rejected.State != "failed" || !strings.HasPrefix(r.Rejected.StatusText, "AGGREGATE_ALREADY_EXISTS") {
				t.Fatalf("rejected command: %+v, want failed with AGGREGATE_ALREADY_EXISTS", r.Rejected)
			}
			sameJSON(t, "rejected task's artifacts", r.Rejected.Artifacts, restEvents(t, first.URL, a2aBootstrap, r.Rejected.ID))
			tasks[sdk] = r.Submitted.ID
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	second := a2aServer(t, ext)
	for sdk, id := range tasks {
		r := runA2AScript(t, map[string]any{"sdk": sdk, "base": second.URL, "key": a2aBootstrap, "mode": "get", "taskId": id})
		if r.Task == nil || r.Task.ID != id || r.Task.State != "completed" {
			t.Fatalf("sdk %s: task %s after the restart: %+v", sdk, id, r.Task)
		}
		sameJSON(t, "artifacts after the restart", r.Task.Artifacts, restEvents(t, second.URL, a2aBootstrap, id))
	}
}

// TestA2AReadmeSnippet runs the JavaScript of the README's "Connect an A2A
// client" as written, against an agentbus without authentication and
// against one that requires a bearer credential (AGENTBUS_KEY).
func TestA2AReadmeSnippet(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	_, after, ok := strings.Cut(text, "\n### Connect an A2A client\n")
	if !ok {
		t.Fatal(`README.md has no "### Connect an A2A client" section`)
	}
	_, code, ok := strings.Cut(after, "\n```js\n")
	if !ok {
		t.Fatal("the README's A2A section has no ```js block")
	}
	code, _, _ = strings.Cut(code, "\n```\n")
	f, err := os.CreateTemp(".", "readme-a2a-*.mjs") // beside node_modules
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if _, err := f.WriteString(code); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for name, s := range map[string]struct {
		url, key string
	}{
		"no auth": {url: testkit.Agentbus(t, testkit.NoNATSPort).URL},
		"bearer":  {url: a2aServer(t).URL, key: a2aBootstrap},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, node, f.Name())
		cmd.Env = append(os.Environ(), "AGENTBUS_URL="+s.url, "AGENTBUS_KEY="+s.key)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: the README's snippet: %v\n%s", name, err, out)
		}
		if !strings.Contains(string(out), "OrderPlaced") || !strings.Contains(string(out), "TASK_STATE_COMPLETED") {
			t.Fatalf("%s: the README's snippet printed %q, want an OrderPlaced event and TASK_STATE_COMPLETED", name, out)
		}
	}
}

// TestA2AJavaScriptClientsStreamLive: @a2a-js/sdk 1.x and 0.3.x stream a
// command that waits (ShipOrder, which no rule handles): the task comes
// submitted, then, once a processor's event for it is stored, that event
// as an artifact update and the completion as a status update.
func TestA2AJavaScriptClientsStreamLive(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	s := a2aServer(t)
	for _, sdk := range []string{"1", "0.3"} {
		t.Run("sdk "+sdk, func(t *testing.T) {
			orderID := "live-" + uuid.NewString()[:8]
			job, _ := json.Marshal(map[string]any{"sdk": sdk, "base": s.URL, "key": a2aBootstrap, "mode": "live",
				"stream": map[string]any{"skill": "ShipOrder", "data": map[string]any{"orderId": orderID, "carrier": "dhl"}}})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, a2aScript)
			cmd.Stdin = bytes.NewReader(job)
			var out bytes.Buffer
			cmd.Stdout = &out
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			eventID := uuid.NewString()
			var errText strings.Builder
			lines := bufio.NewScanner(stderr)
			for lines.Scan() {
				id, ready := strings.CutPrefix(lines.Text(), "READY ")
				if !ready {
					errText.WriteString(lines.Text() + "\n")
					continue
				}
				msg := nats.NewMsg("agentbus.evt.default.order." + bus.ShardOf(orderID) + ".OrderShipped")
				msg.Header.Set("Nats-Msg-Id", eventID)
				msg.Header.Set("Agentbus-Aggregate-Id", orderID)
				msg.Header.Set("Agentbus-Correlation-Id", id)
				msg.Header.Set("Agentbus-Command-Type", "ShipOrder")
				msg.Data = []byte(fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"shipper","type":"OrderShipped","datacontenttype":"application/json","time":"2026-01-01T12:00:00Z","data":{"orderId":%q}}`, eventID, orderID))
				if _, err := s.Conn.JS.PublishMsg(ctx, msg); err != nil {
					t.Fatal(err)
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%s: %v\n%s", a2aScript, err, errText.String())
			}
			var r jsReport
			if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Error != "" || r.Streamed == nil {
				t.Fatalf("%s printed %q (%v)\n%s", a2aScript, out.String(), err, errText.String())
			}
			if want := []string{"task", "artifact", "status"}; !slices.Equal(r.Streamed.Events, want) || r.Streamed.State != "completed" {
				t.Fatalf("the stream: %v ending %s, want %v ending completed", r.Streamed.Events, r.Streamed.State, want)
			}
			sameJSON(t, "streamed artifacts vs GET /events?correlationId=", r.Streamed.Artifacts, restEvents(t, s.URL, a2aBootstrap, r.Streamed.ID))
		})
	}
}
