package main

import (
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/test/testkit"
)

// TestHelp runs the agentbus binary with -h or --help after every command:
// each prints its own usage and flags, and none of another command (keys
// create has no --listen; serve has no --tenant), and agentbus exits 0.
func TestHelp(t *testing.T) {
	bin := testkit.BuildAgentbus(t)
	for _, c := range []struct {
		args  []string
		want  []string // text the output holds
		flags []string // flags it lists
		not   []string // flags it must not list
	}{
		{[]string{"-h"}, []string{"usage: agentbus <command>", "keys create", "streams apply", "backup", "restore"}, nil, nil},
		{[]string{"--help"}, []string{"usage: agentbus <command>"}, nil, nil},
		{[]string{"help"}, []string{"usage: agentbus <command>"}, nil, nil},
		{[]string{"serve", "-h"}, []string{"usage: agentbus serve"},
			[]string{"listen", "ops-listen", "auth", "tenancy", "tenants", "nats-url", "nats-listen", "data", "config", "allow-private-webhooks"}, []string{"tenant", "scope", "json"}},
		{[]string{"serve", "--help"}, []string{"usage: agentbus serve"}, []string{"listen"}, nil},
		{[]string{"streams", "-h"}, []string{"usage: agentbus streams apply"}, nil, nil},
		{[]string{"streams", "apply", "-h"}, []string{"usage: agentbus streams apply"},
			[]string{"nats-url", "nats-listen", "data", "config"}, []string{"listen", "auth", "tenant", "tenancy"}},
		{[]string{"keys", "-h"}, []string{"agentbus keys create", "agentbus keys list", "agentbus keys revoke"}, nil, nil},
		{[]string{"keys", "--help"}, []string{"agentbus keys create"}, nil, nil},
		{[]string{"keys", "create", "-h"}, []string{"usage: agentbus keys create"},
			[]string{"tenant", "scope", "description", "ttl", "tenancy", "nats-url", "nats-listen", "data", "config"}, []string{"listen", "auth", "json", "allow-private-webhooks"}},
		{[]string{"keys", "create", "--help"}, []string{"usage: agentbus keys create"}, []string{"tenant", "scope"}, nil},
		{[]string{"keys", "list", "-h"}, []string{"usage: agentbus keys list"}, []string{"json", "nats-url", "data"}, []string{"listen", "tenant", "scope"}},
		{[]string{"keys", "revoke", "-h"}, []string{"usage: agentbus keys revoke <key id>"}, []string{"nats-url", "data"}, []string{"listen", "tenant", "json"}},
		{[]string{"keys", "revoke", "--help"}, []string{"usage: agentbus keys revoke <key id>"}, nil, nil},
		{[]string{"backup", "-h"}, []string{"usage: agentbus backup --out DIR"}, []string{"out", "nats-url", "nats-listen", "data", "config"}, []string{"listen", "auth", "force", "in"}},
		{[]string{"restore", "-h"}, []string{"usage: agentbus restore --in DIR"}, []string{"in", "force", "nats-url", "data", "config"}, []string{"listen", "auth", "out"}},
		{[]string{"version", "-h"}, []string{"usage: agentbus version"}, nil, nil},
		{[]string{"config", "-h"}, []string{"usage: agentbus config check"}, nil, nil},
		{[]string{"config", "check", "-h"}, []string{"usage: agentbus config check"}, []string{"config", "listen", "ops-listen", "nats-url"}, []string{"tenant", "scope"}},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, c.args...)
			cmd.Env = testkit.ProcessEnv()
			cmd.Dir = t.TempDir() // nothing may be written here, nor a ./data opened
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				t.Errorf("exit status %d, want 0", exit.ExitCode())
			} else if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q", w)
				}
			}
			for _, f := range c.flags {
				if !listsFlag(string(out), f) {
					t.Errorf("output does not list -%s", f)
				}
			}
			for _, f := range c.not {
				if listsFlag(string(out), f) {
					t.Errorf("output lists -%s, a flag of another command", f)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// listsFlag reports whether help, the output of flag.PrintDefaults, lists
// the flag name.
func listsFlag(help, name string) bool {
	return regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(name) + `( |$)`).MatchString(help)
}
