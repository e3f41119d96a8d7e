package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/webhook/send"
	"github.com/agentbus/agentbus/test/testkit"
)

func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return send.SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// signed returns the headers agentbus sends with body, signed at at with
// the keys of secrets (current first).
func signed(t *testing.T, id string, at time.Time, body []byte, secrets ...string) http.Header {
	t.Helper()
	var keys [][]byte
	for _, s := range secrets {
		k, err := send.Key(s)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("webhook-signature", send.Signature(keys, id, at, body))
	return h
}

// TestVerify: verify accepts what agentbus signs (pkg/webhook), with a
// whsec_ secret or any other, and with either secret while two sign; it
// refuses another secret, a changed body or id, a timestamp more than 5
// minutes off, and a delivery without a signature.
func TestVerify(t *testing.T) {
	t.Parallel()
	cur, prev, other := newSecret(t), newSecret(t), newSecret(t)
	plain := "a-plain-secret-of-thirty-two-bytes!"
	body := []byte(`{"specversion":"1.0","id":"ev-1","type":"OrderPlaced","data":{"note":"café ☕"}}`)
	now := time.Now()
	changed := func(h http.Header, k, v string) http.Header {
		h = h.Clone()
		h.Set(k, v)
		return h
	}
	for _, tc := range []struct {
		name   string
		secret string
		h      http.Header
		body   []byte
		ok     bool
	}{
		{"signed", cur, signed(t, "ev-1", now, body, cur), body, true},
		{"a plain secret", plain, signed(t, "ev-1", now, body, plain), body, true},
		{"rotating, the new secret", cur, signed(t, "ev-1", now, body, cur, prev), body, true},
		{"rotating, the old secret", prev, signed(t, "ev-1", now, body, cur, prev), body, true},
		{"4 minutes old", cur, signed(t, "ev-1", now.Add(-4*time.Minute), body, cur), body, true},
		{"another secret", other, signed(t, "ev-1", now, body, cur, prev), body, false},
		{"a changed body", cur, signed(t, "ev-1", now, body, cur), append(bytes.Clone(body), ' '), false},
		{"another id", cur, changed(signed(t, "ev-1", now, body, cur), "webhook-id", "ev-2"), body, false},
		{"6 minutes old", cur, signed(t, "ev-1", now.Add(-6*time.Minute), body, cur), body, false},
		{"6 minutes ahead", cur, signed(t, "ev-1", now.Add(6*time.Minute), body, cur), body, false},
		{"no timestamp", cur, changed(signed(t, "ev-1", now, body, cur), "webhook-timestamp", ""), body, false},
		{"no signature", cur, changed(signed(t, "ev-1", now, body, cur), "webhook-signature", ""), body, false},
		{"a secret that is not base64", "whsec_not base64!", signed(t, "ev-1", now, body, cur), body, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := verify(tc.secret, tc.h, tc.body, now)
			if (err == nil) != tc.ok {
				t.Errorf("verify: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestHandler: a delivery signed with the secret in the file is printed
// and answered 204; one that is not, or before the file exists, is
// printed as refused and answered 401; anything but POST is a 405.
func TestHandler(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "secret")
	var out testkit.LockedBuffer
	srv := httptest.NewServer(handler(file, &out))
	defer srv.Close()
	secret := newSecret(t)
	body := []byte(`{"id":"ev-1","type":"OrderPlaced"}`)
	post := func(h http.Header) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = h
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if s := post(signed(t, "ev-1", time.Now(), body, secret)); s != http.StatusUnauthorized {
		t.Errorf("before the secret is written: %d, want 401", s)
	}
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s := post(signed(t, "ev-1", time.Now(), body, secret)); s != http.StatusNoContent {
		t.Errorf("signed: %d, want 204", s)
	}
	if s := post(signed(t, "ev-2", time.Now(), body, newSecret(t))); s != http.StatusUnauthorized {
		t.Errorf("signed with another secret: %d, want 401", s)
	}
	res, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", res.StatusCode)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"refused ev-1: ", "verified ev-1: " + string(body), "refused ev-2: no signature matches the secret"}
	if len(lines) != len(want) {
		t.Fatalf("printed:\n%s\nwant %d lines", out.String(), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i+1, lines[i], w)
		}
	}
}

// TestRun: the receiver says where it listens and what it reads, serves
// until its context ends, and refuses to start without a secret file; -h
// prints its usage.
func TestRun(t *testing.T) {
	t.Parallel()
	var out, errb testkit.LockedBuffer
	if err := run(context.Background(), []string{"--listen", "127.0.0.1:0"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "--secret-file") {
		t.Errorf("without --secret-file: %v, want an error naming it", err)
	}
	if err := run(context.Background(), []string{"-h"}, &out, &errb); err != nil || !strings.Contains(errb.String(), "usage: example-receiver") {
		t.Errorf("-h: %v\n%s", err, errb.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	addr := testkit.FreeAddr(t)
	go func() { done <- run(ctx, []string{"--listen", addr, "--secret-file", "/nonexistent"}, &out, &errb) }()
	testkit.Eventually(t, "listening", func() bool {
		return strings.Contains(out.String(), "listening on http://"+addr+"/, verifying with the secret in /nonexistent")
	})
	res, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a delivery without its secret: %d, want 401", res.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
