package interop_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/pkg/webhook/send"
	"github.com/agentbus/agentbus/test/testkit"
)

const verifier = "verify-webhook.mjs"

// sample is one delivery for the verifier.
type sample struct {
	Secret  string            `json:"secret"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// verify runs the standardwebhooks package over samples and returns its
// verdicts.
func verify(t *testing.T, samples []sample) []string {
	t.Helper()
	node := requireNode(t)
	if _, err := os.Stat("node_modules/standardwebhooks/package.json"); err != nil {
		t.Fatalf("test/interop/node_modules lacks standardwebhooks: %s", installAdvice)
	}
	in, _ := json.Marshal(samples)
	cmd := exec.Command(node, verifier)
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", verifier, err, errb.String())
	}
	return strings.Split(strings.TrimSpace(out.String()), "\n")
}

func newSecret(t *testing.T) string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return send.SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// TestStandardWebhooksVerifiesOurSignatures: the reference verifier
// accepts agentbus's signatures, with one key and, during a rotation, with
// either of the two keys a delivery is signed with; and refuses a changed
// body or another secret.
func TestStandardWebhooksVerifiesOurSignatures(t *testing.T) {
	t.Parallel()
	cur, prev, other := newSecret(t), newSecret(t), newSecret(t)
	key := func(s string) []byte {
		k, err := send.Key(s)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	body := `{"specversion":"1.0","id":"ev-1","source":"agentbus","type":"OrderPlaced","datacontenttype":"application/json","time":"2026-11-26T12:00:00Z","data":{"orderId":"o-1","note":"caf\u00e9 ☕"}}`
	now := time.Now()
	headers := func(keys ...[]byte) map[string]string {
		return map[string]string{
			"webhook-id":        "ev-1",
			"webhook-timestamp": strconv.FormatInt(now.Unix(), 10),
			"webhook-signature": send.Signature(keys, "ev-1", now, []byte(body)),
		}
	}
	samples := []sample{
		{Secret: cur, Headers: headers(key(cur)), Body: body},
		{Secret: cur, Headers: headers(key(cur), key(prev)), Body: body},
		{Secret: prev, Headers: headers(key(cur), key(prev)), Body: body},
		{Secret: other, Headers: headers(key(cur), key(prev)), Body: body},
		{Secret: cur, Headers: headers(key(cur)), Body: strings.Replace(body, "o-1", "o-2", 1)},
	}
	want := []bool{true, true, true, false, false}
	got := verify(t, samples)
	if len(got) != len(want) {
		t.Fatalf("verdicts %v", got)
	}
	for i, ok := range want {
		if (got[i] == "ok") != ok {
			t.Errorf("sample %d: %s, want ok=%v", i, got[i], ok)
		}
	}
}

// TestStandardWebhooksVerifiesDeliveries: real deliveries of a running
// agentbus — before and during a secret rotation — verify under the
// reference verifier with the secret the subscription was created with and,
// during the rotation, with either secret.
func TestStandardWebhooksVerifiesDeliveries(t *testing.T) {
	t.Parallel()
	type got struct {
		headers map[string]string
		body    string
	}
	var mu sync.Mutex
	var hits []got
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		hits = append(hits, got{headers: map[string]string{"webhook-id": r.Header.Get("webhook-id"),
			"webhook-timestamp": r.Header.Get("webhook-timestamp"), "webhook-signature": r.Header.Get("webhook-signature")}, body: string(b)})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	s := startAgentbus(t, func(c *settings.Config) { c.Webhooks.AllowPrivate = true })
	call := func(method, path string, body any) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, s.URL+path, nil)
		if body != nil {
			raw, _ := json.Marshal(body)
			req, _ = http.NewRequest(method, s.URL+path, bytes.NewReader(raw))
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		if res.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %v", method, path, res.StatusCode, out)
		}
		return out
	}
	sub := call(http.MethodPost, "/subscriptions", map[string]any{"webhook": map[string]any{"url": rcv.URL + "/hook"},
		"filter": map[string]any{"types": []string{"OrderPlaced"}}})
	id := sub["id"].(string)
	first := call(http.MethodGet, "/subscriptions/"+id+"/secret", nil)["secret"].(string)
	order := func(o string) {
		call(http.MethodPost, "/commands", map[string]any{"specversion": "1.0", "id": "cmd-" + o, "source": "interop",
			"type": "PlaceOrder", "datacontenttype": "application/json", "dataschema": "place-order/1.0",
			"time": time.Now().UTC().Format(time.RFC3339), "data": map[string]any{"orderId": o, "customer": "ada",
				"items": []any{map[string]any{"sku": "A-1", "quantity": 1}}}})
	}
	wait := func(n int) []got {
		t.Helper()
		testkit.Eventually(t, "the deliveries", func() bool { mu.Lock(); defer mu.Unlock(); return len(hits) >= n })
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(hits)
	}
	order("o-1")
	before := wait(1)[0]
	call(http.MethodPost, "/subscriptions/"+id+"/secret", map[string]any{})
	second := call(http.MethodGet, "/subscriptions/"+id+"/secret", nil)["secret"].(string)
	order("o-2")
	during := wait(2)[1]
	verdicts := verify(t, []sample{
		{Secret: first, Headers: before.headers, Body: before.body},
		{Secret: first, Headers: during.headers, Body: during.body},
		{Secret: second, Headers: during.headers, Body: during.body},
		{Secret: second, Headers: before.headers, Body: before.body},
	})
	want := []string{"ok", "ok", "ok", "fail"}
	for i := range want {
		if i >= len(verdicts) || (verdicts[i] == "ok") != (want[i] == "ok") {
			t.Fatalf("verdicts %v, want %v (headers during the rotation: %v)", verdicts, want, during.headers)
		}
	}
}
