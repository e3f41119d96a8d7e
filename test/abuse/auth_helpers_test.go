package abuse_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// Helpers of the authentication abuse tests (prefix au).

const (
	auBootstrap  = "bootstrap-key-for-abuse-tests-0123456789"
	auSigningKey = "abuse-token-signing-key-0123456789abcdef!!"
)

// logRecords returns the JSON log records of l whose msg is msg.
func logRecords(t *testing.T, l *testkit.LockedBuffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(l.String(), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// auServer is an agentbus with authentication on, its key registry and
// its log.
type auServer struct {
	*server.Server
	keys *auth.Keys
	kv   *natsjs.KV
	log  *testkit.LockedBuffer
}

// auStart runs agentbus with authentication method typ, the test
// bootstrap key, a known token signing key and no per-credential rate
// limit, logging JSON at info level to the returned server's log; mutate
// edits the configuration last.
func auStart(t *testing.T, typ string, mutate ...func(*settings.Config)) *auServer {
	t.Helper()
	l := &testkit.LockedBuffer{}
	log := slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s := testkit.AgentbusWithLogger(t, log, append([]func(*settings.Config){testkit.NoNATSPort, func(c *settings.Config) {
		c.Auth.Type = typ
		c.Auth.BootstrapKey = auBootstrap
		c.Auth.TokenSigningKey = auSigningKey
		c.Limits.Rate = settings.Rate{}
	}}, mutate...)...)
	keys, kv := testkit.Keys(t, s)
	return &auServer{Server: s, keys: keys, kv: kv, log: l}
}

// mint creates a key for tenants (comma-separated, "*" for all) with
// scopes and returns it with its id.
func (s *auServer) mint(t *testing.T, tenants string, scopes ...auth.Scope) (key, id string) {
	t.Helper()
	key, rec, err := s.keys.Create(context.Background(), auth.NewKeyRequest{Tenants: strings.Split(tenants, ","), Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	return key, rec.ID
}

// auClient returns an HTTP client whose connections come from the
// loopback address from (127.0.0.0/8 is loopback on Linux), so one test
// can be several client addresses.
func auClient(t *testing.T, from string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// auResponse is an answer read in full.
type auResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// code returns error.code of an agentbus error body, or "".
func (r *auResponse) code() string {
	var b struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &b)
	return b.Error.Code
}

// oauthError returns error of an OAuth 2.0 error body, or "".
func (r *auResponse) oauthError() string {
	var b struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &b)
	return b.Error
}

// auDo sends a request with c and reads the answer; extra headers come in
// pairs. It fails t on a transport error.
func auDo(t *testing.T, c *http.Client, method, rawURL, contentType string, body []byte, hdr ...string) *auResponse {
	t.Helper()
	st, h, b, err := testkit.Send(c, method, rawURL, contentType, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return &auResponse{Status: st, Header: h, Body: b}
}

// auTokenRequest asks the token endpoint of base for a token with HTTP
// Basic client authentication.
func auTokenRequest(t *testing.T, c *http.Client, base, clientID, secret, scope string) *auResponse {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}}
	if scope != "" {
		form.Set("scope", scope)
	}
	req, _ := http.NewRequest(http.MethodPost, "/", nil)
	req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	return auDo(t, c, http.MethodPost, base+auth.TokenPath, "application/x-www-form-urlencoded", []byte(form.Encode()),
		"Authorization", req.Header.Get("Authorization"))
}

// auToken gets a token from the token endpoint of base, failing t
// otherwise.
func auToken(t *testing.T, c *http.Client, base, clientID, secret, scope string) string {
	t.Helper()
	r := auTokenRequest(t, c, base, clientID, secret, scope)
	var tr auth.TokenResponse
	if err := json.Unmarshal(r.Body, &tr); err != nil || r.Status != http.StatusOK || tr.AccessToken == "" {
		t.Fatalf("token: %d %s", r.Status, r.Body)
	}
	return tr.AccessToken
}

// auForged returns a well-formed API key that was never issued.
func auForged(t *testing.T) string {
	t.Helper()
	k, _, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// auRetryAfter fails t unless r carries a Retry-After of whole seconds
// between 1 and max.
func auRetryAfter(t *testing.T, what string, r *auResponse, max int) {
	t.Helper()
	ra := r.Header.Get("Retry-After")
	n := 0
	for _, c := range ra {
		if c < '0' || c > '9' {
			n = -1
			break
		}
		n = n*10 + int(c-'0')
	}
	if ra == "" || n < 1 || n > max {
		t.Fatalf("%s: Retry-After %q, want 1 to %d s: %v %s", what, ra, max, r.Header, r.Body)
	}
}
