package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"unicode"

	"github.com/agentbus/agentbus/pkg/client"
)

// clientNotes follows the synopsis of every command that reaches a running
// agentbus over its API (send, events, trace, agents, services,
// subscriptions).
const clientNotes = `These commands reach a running agentbus over its REST API: --url (or
AGENTBUS_URL, default http://127.0.0.1:8080), with an API key (--key,
AGENTBUS_KEY) or a token from /oauth/token (--token, AGENTBUS_TOKEN) when
it asks for one, and --tenant (AGENTBUS_TENANT) in multi-tenant mode. They
print text for people, or the API's JSON with --json. A refusal prints the
API's error code and message (and each violation) and exits with status 1.`

// stdin is what --data - reads.
var stdin io.Reader = os.Stdin

// conn is the connection flags of the client commands.
type conn struct {
	url, key, token, tenant string
	json                    bool
}

// addConnFlags adds the connection flags and --json to fs.
func addConnFlags(fs *flag.FlagSet) *conn {
	c := &conn{}
	fs.StringVar(&c.url, "url", "", "agentbus's base URL, default "+client.DefaultURL+" [AGENTBUS_URL]")
	fs.StringVar(&c.key, "key", "", "API key [AGENTBUS_KEY]")
	fs.StringVar(&c.token, "token", "", "bearer token from /oauth/token [AGENTBUS_TOKEN]")
	fs.StringVar(&c.tenant, "tenant", "", "tenant id, in multi-tenant mode [AGENTBUS_TENANT]")
	fs.BoolVar(&c.json, "json", false, "print the API's JSON instead of text")
	return c
}

// client returns the API client the flags (over the environment) name. A
// key or token given by flag takes the place of both variables.
func (c *conn) client() (*client.Client, error) {
	set(&c.url, c.url, "AGENTBUS_URL")
	set(&c.tenant, c.tenant, "AGENTBUS_TENANT")
	if c.key == "" && c.token == "" {
		c.key, c.token = os.Getenv("AGENTBUS_KEY"), os.Getenv("AGENTBUS_TOKEN")
		if c.key != "" && c.token != "" {
			return nil, errors.New("both AGENTBUS_KEY and AGENTBUS_TOKEN are set: unset one, or give --key or --token")
		}
	}
	if c.key != "" && c.token != "" {
		return nil, errors.New("give --key or --token, not both")
	}
	return client.New(client.Config{URL: c.url, Tenant: c.tenant, Key: c.key, Token: c.token, Source: "agentbus-cli"})
}

// parseArgs parses args with fs, flags and positional arguments in any
// order, and returns the positional ones ("--" ends the flags).
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// apiError returns err for the terminal: an API refusal as its code and
// message, then each violation on its own line; a connection that could
// not be made as the address nobody answered at and the flag naming it.
func apiError(err error) error {
	var ue *url.Error
	var op *net.OpError
	if errors.As(err, &ue) && errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("no agentbus answers at %s (--url or AGENTBUS_URL names it): %w", ue.URL, op)
	}
	var e *client.Error
	if !errors.As(err, &e) {
		return err
	}
	var b strings.Builder
	b.WriteString(e.Code + ": " + e.Message)
	for _, v := range e.Violations() {
		fmt.Fprintf(&b, "\n  %s: %s", v.Path, v.Message)
	}
	return errors.New(harmless(b.String()))
}

// harmless returns s with every control character but newline and tab
// replaced by "?": what agentbus relays (a rejection's message, an
// event's fields, a receiver's answer) cannot drive the terminal that
// prints it.
func harmless(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return '?'
		}
		return r
	}, s)
}

// terminalWriter passes what it is given through harmless. Each Write
// must hold whole characters, as every Fprint of the commands does.
type terminalWriter struct{ w io.Writer }

func (t terminalWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(t.w, harmless(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err = w.Write(b.Bytes())
	return err
}

// readData returns the JSON a --data flag names: @file, - (standard
// input) or the JSON itself.
func readData(v string) (json.RawMessage, error) {
	var raw []byte
	var err error
	switch {
	case v == "-":
		raw, err = io.ReadAll(io.LimitReader(stdin, 16<<20))
	case strings.HasPrefix(v, "@"):
		raw, err = os.ReadFile(v[1:])
	default:
		raw = []byte(v)
	}
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	if !json.Valid(raw) {
		return nil, errors.New("--data: not valid JSON")
	}
	return raw, nil
}

// listFlag is a flag that may be given more than once, each value also a
// comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, splitList(v)...)
	return nil
}

// oneLine returns raw JSON on one line.
func oneLine(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
