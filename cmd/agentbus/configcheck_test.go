package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func checkConfig(t *testing.T, yamlText string, extra ...string) (stdout, stderr string, err error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "agentbus.yaml")
	if err := os.WriteFile(file, []byte(yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	err = run(context.Background(), append([]string{"config", "check", "--config", file}, extra...), &out, &errb)
	return out.String(), errb.String(), err
}

// TestConfigCheckValid: a valid configuration is printed in full as YAML
// in the file's keys, the flags and variables applied, every secret
// masked (config secrets, the password or token of nats.url), and config
// check succeeds without serving.
func TestConfigCheckValid(t *testing.T) {
	const key = "MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=" // base64 of 32 bytes
	t.Setenv("AGENTBUS_LOG_FORMAT", "json")
	out, _, err := checkConfig(t, "nats:\n  url: nats://svc:hunter2hunter2@127.0.0.1:4222,nats://s3cr3ttoken@127.0.0.1:4223\n"+
		"subscriptions:\n  secretKey: "+key+"\n", "--ops-listen", "127.0.0.1:9181")
	if err != nil {
		t.Fatalf("config check: %v", err)
	}
	for _, secret := range []string{key, "hunter2hunter2", "s3cr3ttoken"} {
		if strings.Contains(out, secret) {
			t.Errorf("config check printed a secret, %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{"url: nats://svc:***@127.0.0.1:4222,nats://***@127.0.0.1:4223", "secretKey: '***'",
		"listen: 127.0.0.1:9181", "metrics: true", "format: json", "shutdownTimeout: 15s"} {
		if !strings.Contains(out, want) {
			t.Errorf("config check output lacks %q:\n%s", want, out)
		}
	}
}

// TestConfigCheckInvalid: every wrong setting is named, each on a line of
// its own, and config check fails: unknown keys of the file (all of them),
// and values that break a rule, from the file or a flag.
func TestConfigCheckInvalid(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		extra      []string
		want       []string
	}{
		{"unknown keys", "listen2: x\nnats:\n  urll: y\n  URL: z\n", nil,
			[]string{`"listen2" is not a setting`, `"nats.urll" is not a setting`, `"nats.URL": did you mean "url"?`}},
		{"bad values", "listen: nope\nlog:\n  format: xml\n", []string{"--ops-listen", "127.0.0.1:8080", "--listen", "127.0.0.1:8080"},
			[]string{`log.format "xml"`, `ops.listen "127.0.0.1:8080": must not be the API's listen address`}},
		{"a wrong type", "limits:\n  bodyBytes: lots\n", nil, []string{"limits.bodyBytes"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, err := checkConfig(t, c.yaml, c.extra...)
			if !errors.Is(err, errInvalidConfig) {
				t.Fatalf("config check: %v, want it to fail\n%s", err, out)
			}
			if out != "" {
				t.Errorf("an invalid configuration printed settings:\n%s", out)
			}
			for _, w := range c.want {
				n := 0
				for _, line := range strings.Split(errOut, "\n") {
					if strings.HasPrefix(line, "  - ") && strings.Contains(line, w) {
						n++
					}
				}
				if n != 1 {
					t.Errorf("%q is on %d problem lines, want 1:\n%s", w, n, errOut)
				}
			}
		})
	}
}
