package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
)

// redocly is Redocly CLI's entry point, pinned in package-lock.json.
const redocly = "node_modules/@redocly/cli/bin/cli.js"

// lintProblem is one problem of Redocly CLI's JSON report.
type lintProblem struct {
	RuleID   string `json:"ruleId"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	Location []struct {
		Pointer string `json:"pointer"`
	} `json:"location"`
}

// lint runs Redocly CLI's recommended ruleset on doc and returns every
// problem it reports, errors and warnings alike.
func lint(t *testing.T, node string, doc []byte) []lintProblem {
	t.Helper()
	if _, err := os.Stat(redocly); err != nil {
		if os.Getenv(skipEnv) == "1" {
			t.Skipf("skipping the OpenAPI lint: test/interop/node_modules lacks @redocly/cli (%s=1)", skipEnv)
		}
		t.Fatalf("test/interop/node_modules lacks @redocly/cli: %s", installAdvice)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	// An empty config: the recommended ruleset alone, whatever config
	// file lies around.
	cfg := filepath.Join(dir, "redocly.yaml")
	if err := os.WriteFile(cfg, []byte("extends:\n  - recommended\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := filepath.Abs(redocly)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, bin, "lint", "--config", cfg, "--format", "json", "--max-problems", "1000", file)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatalf("run redocly lint: %v\n%s", err, stderr.String())
	}
	var report struct {
		Totals struct {
			Errors   int `json:"errors"`
			Warnings int `json:"warnings"`
		} `json:"totals"`
		Problems []lintProblem `json:"problems"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("redocly lint: no JSON report (%v):\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if n := report.Totals.Errors + report.Totals.Warnings; n != len(report.Problems) {
		t.Fatalf("redocly lint counts %d errors and %d warnings but lists %d problems", report.Totals.Errors, report.Totals.Warnings, len(report.Problems))
	}
	if err != nil && len(report.Problems) == 0 {
		t.Fatalf("redocly lint failed without a problem: %v\n%s", err, stderr.String())
	}
	return report.Problems
}

func (p lintProblem) String() string {
	var at []string
	for _, l := range p.Location {
		at = append(at, l.Pointer)
	}
	return fmt.Sprintf("%s %s at %s: %s", p.Severity, p.RuleID, strings.Join(at, ", "), p.Message)
}

// TestOpenAPILint lints the served document with Redocly CLI's recommended
// rules in every authentication and tenancy mode that changes it: an error
// or a warning fails the test.
func TestOpenAPILint(t *testing.T) {
	node := requireNode(t)
	cases := []struct {
		name   string
		mutate func(*settings.Config)
	}{
		{name: "none"},
		{name: "bearer", mutate: authType("bearer")},
		{name: "apikey-header", mutate: authType("apikey-header")},
		{name: "apikey-query", mutate: authType("apikey-query")},
		{name: "multi-tenant bearer", mutate: func(c *settings.Config) {
			authType("bearer")(c)
			c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"acme"}
		}},
		{name: "multi-tenant apikey-header event injection", mutate: func(c *settings.Config) {
			authType("apikey-header")(c)
			c.Tenancy.Mode, c.Tenancy.Open = "multi", true
			c.Events.AllowInjection = true
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startAgentbus(t, tc.mutate)
			for _, p := range lint(t, node, servedOpenAPI(t, s)) {
				t.Error(p)
			}
		})
	}
}

// TestLinterReports makes sure the linter run by TestOpenAPILint reports
// what the recommended rules forbid.
func TestLinterReports(t *testing.T) {
	node := requireNode(t)
	doc := `{"openapi":"3.1.0","info":{"title":"x","version":"1"},"servers":[{"url":"http://127.0.0.1:1"}],` +
		`"paths":{"/a":{"get":{"operationId":"a","summary":"a","responses":{"200":{"description":"x"}}}}}}`
	rules := map[string]bool{}
	for _, p := range lint(t, node, []byte(doc)) {
		rules[p.RuleID] = true
	}
	for _, want := range []string{"info-license", "operation-4xx-response", "security-defined"} {
		if !rules[want] {
			t.Errorf("the linter does not report %s on a document that breaks it (reported: %v)", want, rules)
		}
	}
}
