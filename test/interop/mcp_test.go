package interop_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go"
)

const (
	mcpClientScript = "mcp-client.mjs"
	mcpBootstrap    = "bootstrap-key-for-mcp-interop-0123456789"
)

// requireMCPPackages fails (or skips, as requireNode does) without the
// MCP packages.
func requireMCPPackages(t *testing.T) string {
	t.Helper()
	node := requireNode(t)
	for _, p := range []string{"node_modules/@modelcontextprotocol/sdk/package.json", "node_modules/@modelcontextprotocol/inspector/package.json"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("test/interop/%s is missing: %s", p, installAdvice)
		}
	}
	return node
}

// mcpAgentbus runs agentbus with authentication typ and returns it with a
// read and write key of the default tenant.
func mcpAgentbus(t *testing.T, typ string) (*server.Server, string) {
	t.Helper()
	s := startAgentbus(t, func(c *settings.Config) {
		c.Auth.Type, c.Auth.BootstrapKey = typ, mcpBootstrap
		c.Limits.Rate = settings.Rate{}
	})
	return s, testkit.Key(t, s, []string{"default"}, auth.ScopeRead, auth.ScopeWrite)
}

// step is one line the TypeScript client writes.
type step struct {
	Step    string          `json:"step"`
	ID      string          `json:"id"`
	URI     string          `json:"uri"`
	Names   []string        `json:"names"`
	Event   json.RawMessage `json:"event"`
	Events  int             `json:"events"`
	Status  string          `json:"status"`
	IsError bool            `json:"isError"`
	Body    json.RawMessage `json:"body"`
}

// TestMCPTypeScriptClient: the official TypeScript client, over Streamable
// HTTP with a credential (bearer, and an API key header): a wrong one is
// refused; it lists the tools, calls submitCommand and a typed tool and is
// pushed their events after the calls returned, is pushed a rejected
// command's CommandRejected, subscribes to and reads a command's resource
// and is told of its event, and gets a tool error with the error body.
func TestMCPTypeScriptClient(t *testing.T) {
	t.Parallel()
	node := requireMCPPackages(t)
	for _, c := range []struct{ typ, header, prefix string }{
		{"bearer", "Authorization", "Bearer "},
		{"apikey-header", auth.DefaultHeaderScheme, ""},
	} {
		t.Run(c.typ, func(t *testing.T) {
			t.Parallel()
			s, key := mcpAgentbus(t, c.typ)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			steps := runSteps(ctx, t, node, []string{mcpClientScript, s.URL + "/mcp", c.header, c.prefix + key, c.prefix + "abk_wrong_0123456789"},
				func(st step) string {
					if st.Step != "subscribed" {
						return ""
					}
					publishShipped(t, s, st.ID)
					return "published"
				})
			for _, want := range []string{"wrong-credential-refused", "connected", "tools", "submit-pushed", "typed-pushed", "rejected-pushed", "subscribed", "updated", "tool-error", "done"} {
				if _, ok := steps[want]; !ok {
					t.Errorf("step %s missing", want)
				}
			}
			for _, name := range []string{"submitCommand", "listEvents", "getTrace", "place_order", "ship_order"} {
				if !slices.Contains(steps["tools"].Names, name) {
					t.Errorf("tool %s not listed: %v", name, steps["tools"].Names)
				}
			}
			eventType := func(raw json.RawMessage) string {
				var ev struct{ Type string }
				_ = json.Unmarshal(raw, &ev)
				return ev.Type
			}
			if eventType(steps["submit-pushed"].Event) != "OrderPlaced" || eventType(steps["typed-pushed"].Event) != "OrderPlaced" {
				t.Errorf("pushed %s, %s", steps["submit-pushed"].Event, steps["typed-pushed"].Event)
			}
			if !strings.Contains(string(steps["rejected-pushed"].Event), "AGGREGATE_ALREADY_EXISTS") {
				t.Errorf("rejection pushed %s", steps["rejected-pushed"].Event)
			}
			if sub := steps["subscribed"]; sub.Status != "accepted" || sub.Events != 0 {
				t.Errorf("the resource before its event: %+v", sub)
			}
			if up := steps["updated"]; eventType(up.Event) != "OrderShipped" || up.Events != 1 {
				t.Errorf("the update: %+v", up)
			}
			if e := steps["tool-error"]; !e.IsError || !strings.Contains(string(e.Body), `"code":"SCHEMA_NOT_FOUND"`) {
				t.Errorf("tool error: %+v %s", e, e.Body)
			}
		})
	}
}

// publishShipped publishes the OrderShipped event of command corr as a
// processor would.
func publishShipped(t *testing.T, s *server.Server, corr string) {
	t.Helper()
	msg := &nats.Msg{Subject: bus.Subjects{Prefix: "agentbus"}.Event(bus.RootEvents, "default", "order", "ts-o-2", "OrderShipped"),
		Header: nats.Header{},
		Data: []byte(`{"specversion":"1.0","id":"shipped-` + corr + `","source":"interop-processor","type":"OrderShipped",` +
			`"datacontenttype":"application/json","time":"2026-01-01T12:00:00Z","data":{"orderId":"ts-o-2"}}`)}
	msg.Header.Set(bus.HeaderCorrelationID, corr)
	msg.Header.Set(bus.HeaderMsgID, "shipped-"+corr)
	if _, err := s.Conn.NC.RequestMsg(msg, 5*time.Second); err != nil {
		t.Fatalf("publish OrderShipped: %v", err)
	}
}

// TestMCPInspectorCLI: the MCP Inspector's command line lists agentbus's
// tools and calls a typed one against a running agentbus, with a bearer
// credential.
func TestMCPInspectorCLI(t *testing.T) {
	t.Parallel()
	node := requireMCPPackages(t)
	s, key := mcpAgentbus(t, "bearer")
	inspect := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		base := []string{"node_modules/.bin/mcp-inspector", "--cli", s.URL + "/mcp", "--transport", "http", "--header", "Authorization: Bearer " + key}
		cmd := exec.CommandContext(ctx, node, append(base, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := inspect("--method", "tools/list")
	if err != nil || !strings.Contains(out, `"submitCommand"`) || !strings.Contains(out, `"place_order"`) {
		t.Fatalf("tools/list: %v\n%s", err, out)
	}
	out, err = inspect("--method", "tools/call", "--tool-name", "place_order",
		"--tool-arg", "orderId=insp-1", "customer=ada", "currency=EUR", `items=[{"sku":"tea","quantity":1}]`)
	if err != nil || !strings.Contains(out, `accepted`) {
		t.Fatalf("tools/call place_order: %v\n%s", err, out)
	}
	out, err = inspect("--method", "tools/call", "--tool-name", "getCommandSchema", "--tool-arg", "schema=place-order", `version="2.0"`)
	if err != nil || !strings.Contains(out, `PlaceOrder`) {
		t.Fatalf("tools/call getCommandSchema: %v\n%s", err, out)
	}
}

// runSteps runs a node script (args: the script and its arguments) that
// prints one JSON step per line and returns them by name. answer sees each
// step as it comes and returns a line to write back to the script's
// input, or "" for none. It fails t when the script fails.
func runSteps(ctx context.Context, t *testing.T, node string, args []string, answer func(step) string) map[string]step {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	steps := map[string]step{}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var st step
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			t.Fatalf("%s: %s", err, sc.Text())
		}
		steps[st.Step] = st
		if line := answer(st); line != "" {
			_, _ = io.WriteString(stdin, line+"\n")
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v\n%s", args[0], err, stderr.String())
	}
	return steps
}
