package abuse_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// Helpers of the control-plane abuse tests (prefix ctl).

const ctlBootstrap = "bootstrap-key-for-abuse-tests-0123456789"

// ctlClient is the HTTP client of the control tests: no request of theirs
// may hang a test.
var ctlClient = &http.Client{Timeout: 30 * time.Second}

// ctlAnswer is one HTTP answer.
type ctlAnswer struct {
	Status int
	Body   []byte
	Took   time.Duration
	Err    error
}

// code returns error.code of an error body, or "".
func (a ctlAnswer) code() string {
	var b struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(a.Body, &b)
	return b.Error.Code
}

// json decodes the body as an object.
func (a ctlAnswer) json() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(a.Body, &m)
	return m
}

func (a ctlAnswer) String() string {
	if a.Err != nil {
		return a.Err.Error()
	}
	return fmt.Sprintf("%d after %s: %.300s", a.Status, a.Took.Round(time.Millisecond), a.Body)
}

// ctlCall sends method url with body (JSON when not nil) and the bearer
// credential key ("" for none), without touching a test: goroutines call
// it too.
func ctlCall(method, url, key string, body any) ctlAnswer {
	var rd io.Reader
	if body != nil {
		b, ok := body.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(body); err != nil {
				return ctlAnswer{Err: err}
			}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return ctlAnswer{Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	res, err := ctlClient.Do(req)
	if err != nil {
		return ctlAnswer{Err: err, Took: time.Since(start)}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return ctlAnswer{Status: res.StatusCode, Body: b, Took: time.Since(start), Err: err}
}

// ctlMust fails t unless a has status (and, for an error, code).
func ctlMust(t *testing.T, what string, a ctlAnswer, status int, code string) {
	t.Helper()
	if a.Err != nil || a.Status != status || code != "" && a.code() != code {
		t.Fatalf("%s: %s; want %d %s", what, a, status, code)
	}
}

// ctlStart runs agentbus on the NATS server at natsURL ("" for an embedded
// one) in multi-tenant mode with tenants a and b, bearer keys and the
// example catalogues (ShipOrder and ChargeCustomer are left to agents),
// then applies mutate. It returns the server with a read-write key of each
// tenant.
func ctlStart(t *testing.T, natsURL string, mutate ...func(*settings.Config)) (s *server.Server, keyA, keyB string) {
	t.Helper()
	s = testkit.Agentbus(t, append([]func(*settings.Config){testkit.NoNATSPort, func(c *settings.Config) {
		c.NATS.URL = natsURL
		c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"a", "b"}
		c.Auth.Type, c.Auth.BootstrapKey = "bearer", ctlBootstrap
		c.Catalog.Dirs = []string{"../../config/catalog", "../../cmd/example-agent/catalog"}
	}}, mutate...)...)
	rw := []auth.Scope{auth.ScopeRead, auth.ScopeWrite}
	return s, testkit.Key(t, s, []string{"a"}, rw...), testkit.Key(t, s, []string{"b"}, rw...)
}

// ctlNATS starts a nats-server whose streams take at most maxConsumers
// consumers unless they say otherwise (nats-server's own default is
// 1,000), and returns its URL with a JetStream client of it.
func ctlNATS(t *testing.T, maxConsumers int) (string, jetstream.JetStream) {
	t.Helper()
	url := testkit.NATSServer(t, func(o *natsserver.Options) { o.JetStreamLimits.DefaultMaxConsumers = maxConsumers })
	return url, testkit.JetStream(t, url)
}

// ctlFillConsumers creates consumers on the command stream, as external
// processors would, until the server refuses one, and returns their names.
// It fails t when the server takes more than limit.
func ctlFillConsumers(t *testing.T, js jetstream.JetStream, limit int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	for i := 0; ; i++ {
		name := fmt.Sprintf("external_%d", i)
		_, err := js.CreateConsumer(ctx, "AGENTBUS_COMMANDS", jetstream.ConsumerConfig{
			Durable: name, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: fmt.Sprintf("agentbus.cmd.ext.Type%d", i),
		})
		if err != nil {
			if !strings.Contains(err.Error(), "maximum consumers limit reached") {
				t.Fatalf("create consumer %s: %v", name, err)
			}
			return names
		}
		names = append(names, name)
		if len(names) > limit {
			t.Fatalf("the command stream took more than %d consumers", limit)
		}
	}
}

// ctlConsumer returns the info of a consumer on the command stream, or nil.
func ctlConsumer(t *testing.T, js jetstream.JetStream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	return testkit.ConsumerInfo(t, js, "AGENTBUS_COMMANDS", name)
}

// ctlAgent is a registration body of agent id accepting types.
func ctlAgent(id string, accepts ...string) map[string]any {
	if accepts == nil {
		accepts = []string{}
	}
	return map[string]any{"id": id, "name": "agent " + id, "accepts": accepts}
}

// ctlTypes returns n distinct PascalCase type names.
func ctlTypes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("Type%d", i)
	}
	return out
}

// processCPU is the CPU time this process has used so far (agentbus and
// its embedded NATS server run in it), user and system; it fails t when
// the time cannot be read.
func processCPU(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("reading the process's CPU time: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ctlCommand is a command envelope of typ with data.
func ctlCommand(typ, schema string, data any) map[string]any {
	return map[string]any{
		"specversion": "1.0", "id": fmt.Sprintf("ctl-%d", time.Now().UnixNano()), "source": "abuse-test", "type": typ,
		"datacontenttype": "application/json", "dataschema": schema,
		"time": time.Now().UTC().Format(time.RFC3339), "data": data,
	}
}
