package interop_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/webhook"
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
	return webhook.SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// TestStandardWebhooksVerifiesOurSignatures: the reference verifier
// accepts agentbus's signatures, with one key and, during a rotation, with
// either of the two keys a delivery is signed with; and refuses a changed
// body or another secret.
func TestStandardWebhooksVerifiesOurSignatures(t *testing.T) {
	t.Parallel()
	cur, prev, other := newSecret(t), newSecret(t), newSecret(t)
	key := func(s string) []byte {
		k, err := webhook.Key(s)
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
			"webhook-signature": webhook.Signature(keys, "ev-1", now, []byte(body)),
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
