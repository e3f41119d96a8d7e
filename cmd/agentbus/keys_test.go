package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
	if err != nil || !strings.Contains(js, `"id": "`+id+`"`) || strings.Contains(js, "sha256:") {
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
}
