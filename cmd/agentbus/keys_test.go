package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestKeysCommands runs keys create, list and revoke on an embedded store:
// the key is printed once, list never shows a secret, revoke marks it.
func TestKeysCommands(t *testing.T) {
	dir := t.TempDir()
	common := []string{"--data", dir, "--nats-listen", ""}
	runCmd := func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		err := run(context.Background(), append(args, common...), &out, &errb)
		return out.String(), errb.String(), err
	}
	key, msg, err := runCmd("keys", "create", "--tenant", "default", "--scope", "read", "--description", "ci key")
	if err != nil {
		t.Fatalf("create: %v %s", err, msg)
	}
	key = strings.TrimSpace(key)
	if !strings.HasPrefix(key, "ab_") || len(key) != 72 || !strings.Contains(msg, "shown only this once") {
		t.Fatalf("create printed %q / %q", key, msg)
	}
	id := key[3:19]
	list, _, err := runCmd("keys", "list")
	if err != nil || !strings.Contains(list, id) || !strings.Contains(list, "active") || !strings.Contains(list, "ci key") || strings.Contains(list, key[20:]) {
		t.Fatalf("list: %v\n%s", err, list)
	}
	js, _, err := runCmd("keys", "list", "--json")
	if err != nil || !strings.Contains(js, `"id": "`+id+`"`) || strings.Contains(js, "sha256:") || strings.Contains(js, `"hash"`) {
		t.Fatalf("list --json: %v\n%s", err, js)
	}
	if out, _, err := runCmd("keys", "revoke", id); err != nil || !strings.Contains(out, "revoked "+id) {
		t.Fatalf("revoke: %v %s", err, out)
	}
	if list, _, _ = runCmd("keys", "list"); !strings.Contains(list, "revoked") {
		t.Fatalf("list after revoke:\n%s", list)
	}
	if _, _, err := runCmd("keys", "revoke", "aaaaaaaaaaaaaaaa"); err == nil {
		t.Fatal("revoking an unknown key succeeded")
	}
	if _, _, err := runCmd("keys", "create", "--scope", "root"); err == nil {
		t.Fatal("an unknown scope was accepted")
	}
	if _, _, err := runCmd("keys", "create", "--tenancy", "multi"); err == nil || !strings.Contains(err.Error(), "--tenant") {
		t.Fatalf("multi mode without --tenant: %v", err)
	}
	// A tenant of a multi-tenant agentbus: without its tenancy the
	// command says which flag gives it; with it, the key is made.
	if _, _, err := runCmd("keys", "create", "--tenant", "acme"); err == nil || !strings.Contains(err.Error(), "--tenancy multi") {
		t.Fatalf("--tenant acme without --tenancy: %v, want an error naming --tenancy multi", err)
	}
	if key, msg, err := runCmd("keys", "create", "--tenant", "acme", "--tenancy", "multi"); err != nil || !strings.HasPrefix(key, "ab_") {
		t.Fatalf("--tenant acme --tenancy multi: %v %s", err, msg)
	}
}

// TestKeysDoNotWaitForNATS: with no server on nats.listen, a keys command
// probes it once and opens the embedded store, without waiting.
func TestKeysDoNotWaitForNATS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := ln.Addr().String()
	ln.Close()
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"keys", "list", "--json", "--data", t.TempDir(), "--nats-listen", free}, &out, &errb); err != nil {
		t.Fatalf("keys list: %v %s", err, errb.String())
	}
	if strings.Contains(errb.String(), "waiting for NATS") {
		t.Errorf("keys list waited for NATS: %q", errb.String())
	}
	if strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("keys list --json with no key printed %q", out.String())
	}
}

// TestBooleanSwitches: env switches take what strconv.ParseBool takes and
// refuse anything else, naming the variable; a flag overrides env.
func TestBooleanSwitches(t *testing.T) {
	for _, v := range []string{"TRUE", "true", "1", "t"} {
		t.Setenv("AGENTBUS_ALLOW_INSECURE_LISTEN", v)
		var cfg settings.Config
		if err := applyAuthFlags(&cfg, authFlags{}); err != nil || !cfg.Auth.AllowInsecureListen {
			t.Errorf("AGENTBUS_ALLOW_INSECURE_LISTEN=%s: %v, on=%v", v, err, cfg.Auth.AllowInsecureListen)
		}
	}
	t.Setenv("AGENTBUS_ALLOW_INSECURE_LISTEN", "0")
	cfg := settings.Config{}
	cfg.Auth.AllowInsecureListen = true
	if err := applyAuthFlags(&cfg, authFlags{}); err != nil || cfg.Auth.AllowInsecureListen {
		t.Errorf("AGENTBUS_ALLOW_INSECURE_LISTEN=0: %v, on=%v", err, cfg.Auth.AllowInsecureListen)
	}
	if err := applyAuthFlags(&cfg, authFlags{insecure: true}); err != nil || !cfg.Auth.AllowInsecureListen {
		t.Errorf("--allow-insecure-listen over env 0: %v, on=%v", err, cfg.Auth.AllowInsecureListen)
	}
	for _, bad := range []string{"yes", ""} {
		t.Setenv("AGENTBUS_ALLOW_INSECURE_LISTEN", bad)
		if err := applyAuthFlags(&cfg, authFlags{}); err == nil || !strings.Contains(err.Error(), "AGENTBUS_ALLOW_INSECURE_LISTEN") {
			t.Errorf("AGENTBUS_ALLOW_INSECURE_LISTEN=%q: %v, want an error naming the variable", bad, err)
		}
	}
	os.Unsetenv("AGENTBUS_ALLOW_INSECURE_LISTEN")
	t.Setenv("AGENTBUS_OPEN_TENANTS", "on")
	if err := applyAuthFlags(&cfg, authFlags{}); err == nil || !strings.Contains(err.Error(), "AGENTBUS_OPEN_TENANTS") {
		t.Errorf("AGENTBUS_OPEN_TENANTS=on: %v, want an error naming the variable", err)
	}
}

// TestNATSListenFlag: --nats-listen "" means in-process only; without the
// flag the default stands; -h is help, not an error.
func TestNATSListenFlag(t *testing.T) {
	t.Setenv("AGENTBUS_NATS_LISTEN", "")
	os.Unsetenv("AGENTBUS_NATS_LISTEN")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "127.0.0.1:4222"},
		{[]string{"--nats-listen", ""}, ""},
		{[]string{"--nats-listen", "127.0.0.1:4333"}, "127.0.0.1:4333"},
	} {
		cfg, err := loadConfig(newFlags("serve", serveSynopsis, io.Discard), tt.args)
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if cfg.NATS.Listen == nil || *cfg.NATS.Listen != tt.want {
			t.Errorf("%v: nats.listen %v, want %q", tt.args, cfg.NATS.Listen, tt.want)
		}
	}
	if _, err := loadConfig(newFlags("serve", serveSynopsis, io.Discard), []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

// TestAdminCommandsUseARunningServer: while serve holds the embedded store,
// streams apply and keys go through its NATS port on nats.listen.
func TestAdminCommandsUseARunningServer(t *testing.T) {
	dir := t.TempDir()
	natsAddr := testkit.FreeAddr(t)
	_, _, stop := startServe(t, "--data", dir, "--nats-listen", natsAddr)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	common := []string{"--data", dir, "--nats-listen", natsAddr}
	var out, errb bytes.Buffer
	if err := run(context.Background(), append([]string{"streams", "apply"}, common...), &out, &errb); err != nil {
		t.Fatalf("streams apply: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "applied stream AGENTBUS_COMMANDS") {
		t.Fatalf("streams apply printed:\n%s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), append([]string{"keys", "create", "--scope", "read"}, common...), &out, &errb); err != nil {
		t.Fatalf("keys create: %v\n%s", err, errb.String())
	}
	if key := strings.TrimSpace(out.String()); !strings.HasPrefix(key, "ab_") {
		t.Fatalf("keys create printed %q", key)
	}
}

// TestAdminCommandsRefuseAStrangeServer: a NATS server on nats.listen that
// is not a running agentbus's is not written to.
func TestAdminCommandsRefuseAStrangeServer(t *testing.T) {
	url := testkit.NATSServer(t)
	addr := strings.TrimPrefix(url, "nats://")
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"streams", "apply", "--data", t.TempDir(), "--nats-listen", addr}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "not a running agentbus's") {
		t.Fatalf("streams apply against a plain nats-server: %v\n%s", err, out.String())
	}
	info, err := testkit.JetStream(t, url).AccountInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Streams != 0 {
		t.Fatalf("%d streams were created on the plain server", info.Streams)
	}
}

// TestKeysListJSONFlag: --json takes a boolean value; one that is not a
// boolean is an error, not "true".
func TestKeysListJSONFlag(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		arg  string
		json bool
		err  bool
	}{
		{"--json", true, false},
		{"--json=true", true, false},
		{"-json=1", true, false},
		{"--json=false", false, false},
		{"--json=0", false, false},
		{"--json=maybe", false, true},
	} {
		var out bytes.Buffer
		err := run(context.Background(), []string{"keys", "list", c.arg, "--data", dir, "--nats-listen", ""}, &out, io.Discard)
		if (err != nil) != c.err {
			t.Errorf("%s: error %v", c.arg, err)
			continue
		}
		if got := strings.HasPrefix(out.String(), "["); err == nil && got != c.json {
			t.Errorf("%s: printed %q, want JSON %v", c.arg, out.String(), c.json)
		}
	}
}

// TestKeyRequestTenants: in single-tenant mode a key names the default
// tenant (or all); another tenant is refused, since no request could use it.
func TestKeyRequestTenants(t *testing.T) {
	single, multi := settings.Default(), settings.Default()
	multi.Tenancy.Mode = "multi"
	for _, c := range []struct {
		cfg    settings.Config
		tenant string
		ok     bool
	}{
		{single, "", true}, {single, "default", true}, {single, "*", true}, {single, "foo", false},
		{multi, "foo", true}, {multi, "foo,bar", true}, {multi, "", false}, {multi, "Bad!", false},
	} {
		_, err := keyRequest(c.cfg, keyFlags{tenant: c.tenant})
		if (err == nil) != c.ok {
			t.Errorf("%s mode, --tenant %q: %v", c.cfg.Tenancy.Mode, c.tenant, err)
		}
	}
}
