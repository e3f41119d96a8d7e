package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// Helpers of the authentication, tenancy and injection tests (prefix au).

const (
	auBootstrap  = "bootstrap-key-for-e2e-tests-0123456789"
	auSigningKey = "e2e-token-signing-key-0123456789abcdef!!"
)

// auStart runs agentbus with authentication method typ (none, bearer,
// apikey-header, apikey-query), the test bootstrap key, a known token
// signing key and no rate limit, then applies mutate.
func auStart(t *testing.T, typ string, mutate ...func(*settings.Config)) *server.Server {
	t.Helper()
	return start(t, append([]func(*settings.Config){func(c *settings.Config) {
		c.Auth.Type = typ
		if typ != "none" {
			c.Auth.BootstrapKey = auBootstrap
		}
		c.Auth.TokenSigningKey = auSigningKey
		c.Limits.Rate = settings.Rate{}
	}}, mutate...)...)
}

// auMulti puts agentbus in multi-tenant mode with tenants.
func auMulti(tenants ...string) func(*settings.Config) {
	return func(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Tenants = "multi", tenants }
}

// auKeys opens the key registry of s's NATS, as `agentbus keys` does.
func auKeys(t *testing.T, s *server.Server) *auth.Keys {
	t.Helper()
	k, _ := testkit.Keys(t, s)
	return k
}

// auMint creates a key for tenants ("*" for all) with scopes and returns
// it with its id.
func auMint(t *testing.T, k *auth.Keys, tenants string, scopes ...auth.Scope) (string, string) {
	t.Helper()
	key, rec, err := k.Create(context.Background(), auth.NewKeyRequest{Tenants: strings.Split(tenants, ","), Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	return key, rec.ID
}

// auRevoke revokes key id and waits until refused says the server refuses
// it: a revoked key stops working on every replica within a second (the key
// watch), not at once.
func auRevoke(t *testing.T, k *auth.Keys, id string, refused func() bool) {
	t.Helper()
	if _, err := k.Revoke(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, "revoked key "+id+" refused", time.Second, refused)
}

// auWith puts cred on a request to rawURL as method typ says ("" puts
// none): it returns the URL and the headers (name, value pairs) to send,
// hdr among them.
func auWith(typ, rawURL, cred string, hdr ...string) (string, []string) {
	if cred == "" {
		return rawURL, hdr
	}
	switch typ {
	case "bearer":
		hdr = append(hdr, "Authorization", "Bearer "+cred)
	case "apikey-header":
		hdr = append(hdr, auth.DefaultHeaderScheme, cred)
	case "apikey-query":
		sep := "?"
		if strings.Contains(rawURL, "?") {
			sep = "&"
		}
		rawURL += sep + auth.DefaultQueryScheme + "=" + url.QueryEscape(cred)
	}
	return rawURL, hdr
}

// auCall sends a request carrying cred as method typ says ("" sends no
// credential). Extra headers come in pairs.
func auCall(t *testing.T, typ, method, rawURL, cred string, body []byte, hdr ...string) *response {
	t.Helper()
	rawURL, hdr = auWith(typ, rawURL, cred, hdr...)
	ct := ""
	if body != nil {
		ct = "application/json"
	}
	return do(t, method, rawURL, ct, body, hdr...)
}

// auExpect fails unless r has status and, for an error, the error body
// with code.
func auExpect(t *testing.T, what string, r *response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.Status, status, r.Body)
	}
	if code != "" {
		if got := r.errorCode(t); got != code {
			t.Fatalf("%s: error code %s, want %s: %s", what, got, code, r.Body)
		}
	}
}

// auToken gets a bearer token from the token endpoint with HTTP Basic.
func auToken(t *testing.T, base, clientID, secret, scope string) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}}
	if scope != "" {
		form.Set("scope", scope)
	}
	req, _ := http.NewRequest(http.MethodPost, base+auth.TokenPath, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var tr auth.TokenResponse
	if err := json.NewDecoder(res.Body).Decode(&tr); err != nil || res.StatusCode != 200 || tr.AccessToken == "" {
		t.Fatalf("token: status %d, err %v, %+v", res.StatusCode, err, tr)
	}
	return tr.AccessToken
}

// auEvent returns a valid event envelope of typ for injection.
func auEvent(typ string, data map[string]any) map[string]any {
	return map[string]any{
		"specversion": "1.0", "id": "evt-" + strconv.FormatInt(seq.Add(1), 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		"source": "e2e-injector", "type": typ, "datacontenttype": "application/json",
		"time": time.Now().UTC().Format(time.RFC3339), "data": data,
	}
}

// auEvents returns the events of a GET /events page.
func auEvents(t *testing.T, r *response) []map[string]any {
	t.Helper()
	if r.Status != 200 {
		t.Fatalf("GET events: %d %s", r.Status, r.Body)
	}
	var page struct {
		Events []map[string]any `json:"events"`
	}
	if err := json.Unmarshal(r.Body, &page); err != nil {
		t.Fatal(err)
	}
	return page.Events
}
