// Package readme_test runs the README's walk-throughs as written and checks
// that every answer is the one the README promises: the curl walk-through
// against an in-process agentbus, and the sections written for terminals
// side by side (the example agent, multi-tenant mode) against the binaries
// built from cmd/. It also holds the quick start to the Makefile and
// go.mod, and the README to its shape and its links. A change to the
// README (or to agentbus) that breaks a walk-through fails here.
package readme_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/test/testkit"
)

const (
	readmePath = "../../README.md"
	// readmeBase is the address the README's commands use.
	readmeBase = "http://127.0.0.1:8080"
	// Sections whose sh blocks form the walk-through, in order: the second
	// uses $ID from the first.
	walkSection  = "## Walk-through"
	agentSection = "## Agents, services and traces"
)

// Marker bytes written around each command's text by the DEBUG trap, so
// that the output of the run splits into (command, output) records; varSep
// separates the values of the variables the epilogue prints.
const (
	recStart = "\x1e"
	recEnd   = "\x1f"
	varSep   = "\x1d"
)

// record is one top-level command of the walk-through and what it printed.
type record struct {
	Cmd string
	Out string
}

// block is a fenced code block of the README.
type block struct {
	Lang string
	Text string
	Line int // 1-based line of the opening fence
}

// sections returns the fenced blocks of each "## " and "### " section, by
// heading: a block belongs to the heading nearest above it.
func sections(t *testing.T, readme string) map[string][]block {
	t.Helper()
	out := map[string][]block{}
	heading := ""
	var cur *block
	var body []string
	for i, line := range strings.Split(readme, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if trimmed == "```" {
				cur.Text = strings.Join(body, "\n") + "\n"
				out[heading] = append(out[heading], *cur)
				cur, body = nil, nil
				continue
			}
			body = append(body, line)
			continue
		}
		if strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ") {
			heading = strings.TrimSpace(line)
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			cur = &block{Lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), Line: i + 1}
		}
	}
	if cur != nil {
		t.Fatalf("README.md: code block opened at line %d is never closed", cur.Line)
	}
	return out
}

// shellBlocks returns the text of the sh blocks of section.
func shellBlocks(t *testing.T, secs map[string][]block, section string) string {
	t.Helper()
	blocks, ok := secs[section]
	if !ok {
		t.Fatalf("README.md has no %q section: the walk-through this test runs is gone", section)
	}
	var sb strings.Builder
	for _, b := range blocks {
		if b.Lang == "sh" || b.Lang == "bash" {
			sb.WriteString(b.Text)
		}
	}
	if sb.Len() == 0 {
		t.Fatalf("README.md section %q has no ```sh block", section)
	}
	return sb.String()
}

// startAgentbus runs agentbus in-process on a fresh embedded store.
func startAgentbus(t *testing.T) *server.Server {
	t.Helper()
	return testkit.Agentbus(t, testkit.NoNATSPort)
}

// scriptOpts say where and how runScript runs a script.
type scriptOpts struct {
	dir  string   // working directory; default a fresh temporary one
	env  []string // added to the environment
	vars []string // shell variables whose values it returns
}

// runScript runs script with bash -euo pipefail and returns its records
// and the values of opts.vars at its end. A DEBUG trap (not inherited by
// command substitutions) prints a marker with each top-level command's
// text before it runs, so the commands themselves run exactly as written.
func runScript(t *testing.T, script string, opts scriptOpts) ([]record, map[string]string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed (command -v curl finds nothing): the README walk-through needs it; install curl")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash is not installed: the README walk-through test runs the script with bash -euo pipefail")
	}
	dir := t.TempDir()
	prologue := fmt.Sprintf("trap 'printf \"\\n%s%%s%s\\n\" \"$BASH_COMMAND\"' DEBUG\n", recStart, recEnd)
	epilogue := "printf '%s" + varSep + "'"
	for _, v := range opts.vars {
		epilogue += fmt.Sprintf(" \"${%s-}\"", v)
	}
	if len(opts.vars) == 0 {
		epilogue += " ''"
	}
	path := filepath.Join(dir, "walkthrough.sh")
	if err := os.WriteFile(path, []byte(prologue+script+"\n"+epilogue+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A private curl home (no ~/.curlrc) bounds every request; proxies and
	// BASH_ENV of the caller must not change what the script does.
	if err := os.WriteFile(filepath.Join(dir, ".curlrc"), []byte("max-time = 30\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(scriptEnv(dir), opts.env...)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", path)
	cmd.Env = env
	cmd.Dir = dir
	if opts.dir != "" {
		cmd.Dir = opts.dir
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	recs := parseRecords(stdout.String())
	if err != nil {
		last := "(none)"
		if len(recs) > 0 {
			last = recs[len(recs)-1].Cmd
		}
		t.Fatalf("the README walk-through fails under bash -euo pipefail: %v\nlast command: %s\nstderr:\n%s\nstdout:\n%s",
			err, last, stderr.String(), stdout.String())
	}
	if len(recs) == 0 || recs[len(recs)-1].Cmd != epilogue {
		t.Fatalf("walk-through output does not end with the test's epilogue; stdout:\n%s", stdout.String())
	}
	vals := map[string]string{}
	for i, v := range strings.Split(recs[len(recs)-1].Out, varSep) {
		if i < len(opts.vars) {
			vals[opts.vars[i]] = v
		}
	}
	recs = recs[:len(recs)-1]
	t.Cleanup(func() {
		if t.Failed() {
			for i, r := range recs {
				t.Logf("walk-through command %d: %s\n-> %s", i+1, r.Cmd, r.Out)
			}
		}
	})
	return recs, vals
}

// scriptEnv is the environment of the README's scripts: the test's own
// without AGENTBUS_* settings, proxies or a BASH_ENV, and with curl's home
// in dir.
func scriptEnv(dir string) []string {
	var env []string
	for _, kv := range testkit.ProcessEnv() { // no AGENTBUS_* setting of the caller's
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(name) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy", "bash_env", "env", "curl_home":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "CURL_HOME="+dir, "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
}

// parseRecords splits the script's stdout at the DEBUG trap's markers.
func parseRecords(out string) []record {
	parts := strings.Split(out, "\n"+recStart)
	var recs []record
	for _, p := range parts[1:] {
		cmd, rest, ok := strings.Cut(p, recEnd+"\n")
		if !ok {
			recs = append(recs, record{Cmd: p})
			continue
		}
		recs = append(recs, record{Cmd: cmd, Out: rest})
	}
	return recs
}

var includeHeaders = regexp.MustCompile(`(^|\s)-[a-z]*i[a-z]*(\s|$)`)

// httpAnswer is a response printed by curl -i.
type httpAnswer struct {
	Status int
	Header http.Header
	Body   string
}

// parseHTTP parses the output of curl -i.
func parseHTTP(t *testing.T, r record) httpAnswer {
	t.Helper()
	head, body, _ := strings.Cut(strings.ReplaceAll(r.Out, "\r\n", "\n"), "\n\n")
	lines := strings.Split(head, "\n")
	f := strings.Fields(lines[0])
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		t.Fatalf("%s\nprinted no HTTP status line:\n%s", r.Cmd, r.Out)
	}
	status, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("%s\nbad HTTP status line %q", r.Cmd, lines[0])
	}
	h := http.Header{}
	for _, l := range lines[1:] {
		if k, v, ok := strings.Cut(l, ":"); ok {
			h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	return httpAnswer{Status: status, Header: h, Body: body}
}

func jsonOf(t *testing.T, what, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%s: not a JSON object (%v):\n%s", what, err, s)
	}
	return m
}

// errorBody returns error.code, error.message and the violations of an
// error body, or ok=false when s is not one.
func errorBody(s string) (code, message string, violations []violation, ok bool) {
	var b struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Details struct {
				Violations []violation `json:"violations"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(s), &b) != nil || b.Error == nil || b.Error.Code == "" {
		return "", "", nil, false
	}
	return b.Error.Code, b.Error.Message, b.Error.Details.Violations, true
}

type violation struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// find returns the indices of the records whose command matches every
// pattern; it fails when there are not exactly want of them.
func find(t *testing.T, recs []record, want int, what string, patterns ...string) []int {
	t.Helper()
	var idx []int
	for i, r := range recs {
		if !strings.HasPrefix(strings.TrimSpace(r.Cmd), "curl ") {
			continue
		}
		all := true
		for _, p := range patterns {
			if !regexp.MustCompile(p).MatchString(r.Cmd) {
				all = false
				break
			}
		}
		if all {
			idx = append(idx, i)
		}
	}
	if len(idx) != want {
		t.Fatalf("README walk-through: want %d command(s) for %s (matching %q), found %d", want, what, patterns, len(idx))
	}
	return idx
}

func TestReadmeWalkthrough(t *testing.T) {
	raw, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	secs := sections(t, string(raw))
	script := shellBlocks(t, secs, walkSection) + shellBlocks(t, secs, agentSection)
	if !strings.Contains(script, readmeBase) {
		t.Fatalf("the walk-through no longer calls %s; update this test's readmeBase", readmeBase)
	}
	s := startAgentbus(t)
	script = strings.ReplaceAll(script, readmeBase, s.URL)
	var other []string
	for _, a := range regexp.MustCompile(`(127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1\])(:\d+)?`).FindAllString(script, -1) {
		if a != strings.TrimPrefix(s.URL, "http://") && !slices.Contains(other, a) {
			other = append(other, a)
		}
	}
	if len(other) > 0 {
		t.Fatalf("the walk-through calls %q, not %s (the address agentbus serves with make run)", other, readmeBase)
	}
	if bad := foreignHosts(script, s.URL); len(bad) > 0 {
		t.Fatalf("the walk-through would reach beyond the test's agentbus %s (README: %s):\n%s", s.URL, readmeBase, strings.Join(bad, "\n"))
	}

	// go run ./cmd/agentbus runs the binary built now (see goShim).
	shim := goShim(t, script, &terminals{base: s.URL})
	recs, vars := runScript(t, script, scriptOpts{vars: []string{"ID"},
		env: []string{"PATH=" + shim + string(os.PathListSeparator) + os.Getenv("PATH")}})
	id := vars["ID"]
	expectedError := map[int]bool{}

	// Submit: 202 with a correlation id and the Location of its trace.
	sub := find(t, recs, 1, "the first submit (curl -si, cmd-1)", `"id":"cmd-1"`, `POST`, `/commands\b`)[0]
	if !includeHeaders.MatchString(recs[sub].Cmd) {
		t.Fatalf("the first submit no longer shows its status (curl -si): %s", recs[sub].Cmd)
	}
	a := parseHTTP(t, recs[sub])
	if a.Status != http.StatusAccepted {
		t.Fatalf("submit: status %d, README says 202:\n%s", a.Status, recs[sub].Out)
	}
	body := jsonOf(t, "submit answer", a.Body)
	firstID, _ := body["id"].(string)
	if firstID == "" || body["status"] != "accepted" {
		t.Fatalf(`submit: want {"id": "<correlation id>", "status": "accepted"}, got %s`, a.Body)
	}
	if loc := a.Header.Get("Location"); !strings.Contains(loc, "/traces/"+firstID) {
		t.Errorf("submit: Location %q, README says it is the trace of %s", loc, firstID)
	}
	// "the same envelope always gets the same id": $ID is that id.
	if id != firstID {
		t.Fatalf("$ID is %q; README says the resubmitted envelope gets the same id %q", id, firstID)
	}

	// The events that command caused: one OrderPlaced.
	ev := find(t, recs, 1, "the events of $ID", `/events\?correlationId=\$(ID|\{ID\})`)[0]
	events, _ := jsonOf(t, "GET /events?correlationId=$ID", recs[ev].Out)["events"].([]any)
	if len(events) != 1 || events[0].(map[string]any)["type"] != "OrderPlaced" {
		t.Errorf("GET /events?correlationId=$ID: README says one OrderPlaced, got:\n%s", recs[ev].Out)
	}

	// Placing ord-1 again (cmd-2) is accepted, then rejected by the aggregate rule.
	again := find(t, recs, 1, "the second PlaceOrder of ord-1 (cmd-2)", `"id":"cmd-2"`, `"orderId":"ord-1"`)[0]
	againBody := recs[again].Out
	if includeHeaders.MatchString(recs[again].Cmd) {
		againBody = parseHTTP(t, recs[again]).Body
	}
	m := jsonOf(t, "the cmd-2 submit answer", againBody)
	againID, _ := m["id"].(string)
	if againID == "" || againID == firstID || m["status"] != "accepted" {
		t.Fatalf("cmd-2 submit: want a new correlation id, accepted; got %s", againBody)
	}
	rejected := waitRejected(t, s.URL, againID, "cmd-2")
	if rejected["code"] != "AGGREGATE_ALREADY_EXISTS" || rejected["commandType"] != "PlaceOrder" {
		t.Errorf("cmd-2: want CommandRejected AGGREGATE_ALREADY_EXISTS of PlaceOrder, got %v", rejected)
	}

	// The invalid command is refused with every violation.
	bad := find(t, recs, 1, "the invalid command (cmd-3)", `"id":"cmd-3"`)[0]
	expectedError[bad] = true
	code, msg, viol, ok := errorBody(recs[bad].Out)
	if !ok || code != "VALIDATION_FAILED" {
		t.Fatalf("cmd-3: want a VALIDATION_FAILED error body, got:\n%s", recs[bad].Out)
	}
	paths := violationPaths(viol)
	if !slices.Equal(paths, []string{"$.data.customer", "$.data.items.0.quantity"}) {
		t.Errorf("cmd-3: violations at %q, README shows $.data.customer and $.data.items.0.quantity", paths)
	}
	checkErrorExample(t, secs, code, msg, viol)

	// Agents and services.
	status := func(what string, i, want int) httpAnswer {
		t.Helper()
		if !includeHeaders.MatchString(recs[i].Cmd) {
			t.Fatalf("%s no longer shows its status (curl -si): %s", what, recs[i].Cmd)
		}
		a := parseHTTP(t, recs[i])
		if a.Status != want {
			t.Errorf("%s: status %d, README says %d:\n%s", what, a.Status, want, recs[i].Out)
		}
		return a
	}
	status("register agent shipper", find(t, recs, 1, "POST /agents", `POST`, `/agents(\s|'|"|$)`)[0], http.StatusCreated)
	getAgent := find(t, recs, 1, "GET /agents/shipper", `/agents/shipper(\s|'|"|$)`, `^curl -s `)[0]
	if got := jsonOf(t, "GET /agents/shipper", recs[getAgent].Out); got["id"] != "shipper" {
		t.Errorf("GET /agents/shipper: want the agent record, got %s", recs[getAgent].Out)
	}
	pauses := find(t, recs, 2, "pause twice", `POST`, `/agents/shipper/pause\b`)
	status("first pause", pauses[0], http.StatusNoContent)
	second := status("second pause", pauses[1], http.StatusConflict)
	expectedError[pauses[1]] = true
	if c, _, _, ok := errorBody(second.Body); !ok || c != "AGENT_ALREADY_PAUSED" {
		t.Errorf("second pause: want AGENT_ALREADY_PAUSED in the error body, got:\n%s", recs[pauses[1]].Out)
	}
	status("resume", find(t, recs, 1, "resume", `POST`, `/agents/shipper/resume\b`)[0], http.StatusNoContent)
	tr := find(t, recs, 1, "the trace of $ID", `/traces/\$(ID|\{ID\})`)[0]
	if trace := recs[tr].Out; !strings.Contains(trace, firstID) || !strings.Contains(trace, "OrderPlaced") {
		t.Errorf("GET /traces/$ID: want the life of %s with its OrderPlaced, got:\n%s", firstID, trace)
	}
	status("delete agent", find(t, recs, 1, "DELETE /agents/shipper", `DELETE`, `/agents/shipper\b`)[0], http.StatusNoContent)
	status("register service billing", find(t, recs, 1, "POST /services", `POST`, `/services\b`)[0], http.StatusCreated)
	list := find(t, recs, 1, "GET /services", `^curl -s \S*/services["']?$`)[0]
	if !strings.Contains(recs[list].Out, `"billing"`) {
		t.Errorf("GET /services: want billing listed, got:\n%s", recs[list].Out)
	}

	// The same from the agentbus binary.
	cli := func(what, pattern string) string {
		t.Helper()
		var idx []int
		for i, r := range recs {
			if strings.HasPrefix(strings.TrimSpace(r.Cmd), "go run ./cmd/agentbus ") && regexp.MustCompile(pattern).MatchString(r.Cmd) {
				idx = append(idx, i)
			}
		}
		if len(idx) != 1 {
			t.Fatalf("README walk-through: want 1 agentbus command for %s (matching %q), found %d", what, pattern, len(idx))
		}
		return recs[idx[0]].Out
	}
	sent := strings.Split(strings.TrimSpace(cli("send --wait", `agentbus send PlaceOrder --wait`)), "\n")
	if len(sent) != 3 || len(sent[0]) != 36 || sent[1] != "processed" || !regexp.MustCompile(`  OrderPlaced  \S+  \{"orderId":"ord-cli",`).MatchString(sent[2]) {
		t.Errorf("agentbus send --wait: README says the correlation id, processed and the OrderPlaced; got:\n%s", strings.Join(sent, "\n"))
	}
	if out := cli("events", `agentbus events --type OrderPlaced`); strings.Count(out, "  OrderPlaced  ") != 2 {
		t.Errorf("agentbus events --type OrderPlaced: want ord-1's and ord-cli's OrderPlaced, got:\n%s", out)
	}
	if out := cli("trace", `agentbus trace \$ID`); !strings.Contains(out, "correlation  "+firstID+"\n") || !strings.Contains(out, "status       processed\n") || !strings.Contains(out, "  OrderPlaced  ") {
		t.Errorf("agentbus trace $ID: want the story of %s, got:\n%s", firstID, out)
	}
	if out := cli("agents list", `agentbus agents list`); !regexp.MustCompile(`(?m)^shipper\s+Shipping agent\s+active\s+ShipOrder`).MatchString(out) {
		t.Errorf("agentbus agents list: README says shipper, active again; got:\n%s", out)
	}
	if out := cli("services list", `agentbus services list`); !regexp.MustCompile(`(?m)^billing\s+Billing\s+ChargeCustomer`).MatchString(out) {
		t.Errorf("agentbus services list: want billing, got:\n%s", out)
	}

	// Every other command works: a 2xx, or a JSON answer that is not an error.
	for i, r := range recs {
		if expectedError[i] || !strings.HasPrefix(strings.TrimSpace(r.Cmd), "curl ") {
			continue
		}
		out := r.Out
		if includeHeaders.MatchString(r.Cmd) {
			a := parseHTTP(t, r)
			if a.Status >= 300 {
				t.Errorf("%s\nanswered %d:\n%s", r.Cmd, a.Status, r.Out)
			}
			out = a.Body
		}
		if strings.TrimSpace(out) == "" {
			continue
		}
		if !json.Valid([]byte(out)) {
			t.Errorf("%s\nprinted no JSON:\n%s", r.Cmd, out)
		} else if c, _, _, ok := errorBody(out); ok {
			t.Errorf("%s\nanswered with error %s:\n%s", r.Cmd, c, out)
		}
	}
}

func violationPaths(v []violation) []string {
	var p []string
	for _, x := range v {
		p = append(p, x.Path)
	}
	sort.Strings(p)
	return p
}

// checkErrorExample checks that the README's json blocks parse and that
// the error body it shows is the one the invalid command really gets.
func checkErrorExample(t *testing.T, secs map[string][]block, code, msg string, viol []violation) {
	t.Helper()
	example, valid := "", true
	for heading, blocks := range secs {
		for _, b := range blocks {
			if b.Lang != "json" {
				continue
			}
			if !json.Valid([]byte(b.Text)) {
				t.Errorf("README.md line %d (%s): the json block is not valid JSON:\n%s", b.Line, heading, b.Text)
				valid = valid && heading != walkSection
			}
			if heading == walkSection {
				example = b.Text
			}
		}
	}
	if example == "" {
		t.Fatalf("README.md %q has no json block showing the error body", walkSection)
	}
	if !valid {
		return
	}
	c, m, v, ok := errorBody(example)
	if !ok {
		t.Fatalf("README.md: the error body example is not {\"error\": {\"code\", ...}}:\n%s", example)
	}
	if c != code || m != msg || !slices.Equal(sortViolations(v), sortViolations(viol)) {
		got, _ := json.Marshal(map[string]any{"code": code, "message": msg, "violations": viol})
		t.Errorf("README.md's error body example is not what the walk-through's invalid command gets:\nREADME: %s\nserver: %s", example, got)
	}
}

func sortViolations(v []violation) []violation {
	v = slices.Clone(v)
	sort.Slice(v, func(i, j int) bool { return v[i].Path < v[j].Path })
	return v
}

// waitRejected polls GET /events?type=CommandRejected until the rejection
// of the command with correlation id corr (envelope id envID) is there and
// returns its data.
func waitRejected(t *testing.T, base, corr, envID string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		res, err := http.Get(base + "/events?type=CommandRejected&limit=1000")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		last = string(b)
		var page struct {
			Events []struct {
				Type string         `json:"type"`
				Data map[string]any `json:"data"`
			} `json:"events"`
		}
		if res.StatusCode == http.StatusOK && json.Unmarshal(b, &page) == nil {
			for _, e := range page.Events {
				// commandId is the command's correlation id (or, were
				// it ever the envelope's, that id).
				if id := e.Data["commandId"]; e.Type == "CommandRejected" && (id == corr || id == envID) {
					return e.Data
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no CommandRejected for %s (%s) after 15s; GET /events?type=CommandRejected: %s", envID, corr, last)
	return nil
}

// urlPattern matches an http(s) URL's scheme and host (with port).
var urlPattern = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*)://([^/\s'"?#\\]*)`)

// curlStart matches the word curl where a shell command can start.
var curlStart = regexp.MustCompile(`(?:^|[\s;|&(])(curl)(?:\s|$)`)

// curlFlags are the curl options without an argument the walk-through may
// use, curlArgs those that take one; any other option is refused, since it
// could send the request elsewhere (--proxy, --connect-to, --resolve, ...).
var (
	curlFlags = map[string]bool{
		"-s": true, "-S": true, "-i": true, "-f": true, "-L": true, "-v": true, "-N": true, "-g": true,
		"--silent": true, "--show-error": true, "--include": true, "--fail": true, "--no-buffer": true,
	}
	curlArgs = map[string]bool{
		"-X": true, "-H": true, "-d": true, "-u": true,
		"--request": true, "--header": true, "--data": true, "--data-raw": true, "--data-binary": true, "--user": true,
	}
)

// baseAssign finds the assignments of BASE, agentbus's address in the
// walk-throughs, and their values.
var baseAssign = regexp.MustCompile(`(?m)^\s*BASE=(\S*)`)

// foreignHosts returns what in script could reach another host than
// base's: every URL whose scheme and host are not base's (or, with http,
// one of receivers, where a webhook URL may point), and in every curl
// command every option it does not know and every operand that is not a
// URL under base. $BASE in an operand stands for base when every BASE=
// of script sets it to base.
func foreignHosts(script, base string, receivers ...string) []string {
	var bad []string
	assigns := baseAssign.FindAllStringSubmatch(script, -1)
	expand := len(assigns) > 0
	for _, a := range assigns {
		expand = expand && a[1] == base
	}
	scheme, host, _ := strings.Cut(base, "://")
	for _, m := range urlPattern.FindAllStringSubmatch(script, -1) {
		if strings.EqualFold(m[1], "http") && slices.Contains(receivers, m[2]) {
			continue
		}
		if !strings.EqualFold(m[1], scheme) || m[2] != host {
			bad = append(bad, "URL "+m[0])
		}
	}
	joined := strings.ReplaceAll(script, "\\\n", " ")
	for _, loc := range curlStart.FindAllStringSubmatchIndex(joined, -1) {
		words := shellWords(joined[loc[2]:])[1:] // after curl
		operands := 0
		for i := 0; i < len(words); i++ {
			w := words[i]
			switch {
			case curlArgs[w]:
				i++
			case strings.HasPrefix(w, "--"):
				if !curlFlags[w] {
					bad = append(bad, "curl option "+w)
				}
			case strings.HasPrefix(w, "-") && len(w) > 1:
				// Short options joined (-si), the last one may take the
				// rest of the word or the next word as its argument.
				for j := 1; j < len(w); j++ {
					o := "-" + w[j:j+1]
					if curlArgs[o] {
						if j == len(w)-1 {
							i++
						}
						break
					}
					if !curlFlags[o] {
						bad = append(bad, "curl option "+o+" in "+w)
						break
					}
				}
			default:
				operands++
				if expand {
					w = strings.NewReplacer("${BASE}", base, "$BASE", base).Replace(w)
				}
				if w != base && !strings.HasPrefix(w, base+"/") && !strings.HasPrefix(w, base+"?") {
					bad = append(bad, "curl operand "+w)
				}
			}
		}
		if operands == 0 {
			bad = append(bad, "curl without a URL: "+strings.Join(words, " "))
		}
	}
	return bad
}

// shellWords splits the first command of s into words, with quotes
// removed and the text inside kept as is ($ID stays $ID). It stops at an
// unquoted newline, ;, |, &, ) or a # starting a word.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' || c == '"':
			end := strings.IndexByte(s[i+1:], c)
			if end < 0 {
				end = len(s) - i - 1
			}
			cur.WriteString(s[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case c == ' ' || c == '\t':
			flush()
		case c == '\n' || c == ';' || c == '|' || c == '&' || c == ')' || c == '(' || c == '#' && !inWord:
			flush()
			return words
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words
}
