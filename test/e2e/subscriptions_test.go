package e2e_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/secrets"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestSubscriptionLifecycle walks a subscription through the REST
// operations: created with a generated secret that its 201 does not show
// (GET /subscriptions/{id}/secret does), read and listed without it,
// rotated (both secrets sign during the overlap; the answer shows neither,
// the secret route the new one), enabled while active (409), deleted (its
// secret erased), and gone (404 everywhere, the secret route too).
func TestSubscriptionLifecycle(t *testing.T) {
	t.Parallel()
	s := start(t, suLoopback)
	base, hook := s.URL, suReceiver(t)

	r := postJSON(t, base+"/subscriptions", suBody(hook, []string{suNever, "OrderShipped"}, nil))
	rec := suCreated(t, "create", r)
	id := rec["id"].(string)
	webhook := rec["webhook"].(map[string]any)
	if webhook["url"] != hook || len(webhook) != 1 || strings.Contains(string(r.Body), "secret") {
		t.Fatalf("201 body: %s", r.Body)
	}
	generated := suSecret(t, base, id)
	if !strings.HasPrefix(generated, "whsec_") || len(secrets.SigningKey(generated)) < 24 {
		t.Fatal("the generated secret is not whsec_ and the base64 of at least 24 bytes")
	}
	if rec["serviceId"] != nil || fmt.Sprint(rec["filter"]) != "map[types:["+suNever+" OrderShipped]]" ||
		rec["createdAt"] == nil || rec["updatedAt"] != rec["createdAt"] {
		t.Fatalf("201 body: %s", r.Body)
	}
	suSignsWith(t, s, "default", id, generated)

	g := get(t, base+"/subscriptions/"+id)
	auExpect(t, "get", g, 200, "")
	if got := g.JSON(t); fmt.Sprint(got) != fmt.Sprint(rec) {
		t.Fatalf("GET differs from the 201:\n%s\n%v", g.Body, rec)
	}
	given := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("g"), 32))
	r2 := postJSON(t, base+"/subscriptions", suWithSecret(hook, given, []string{suNever}))
	id2 := suCreated(t, "create with a secret", r2)["id"].(string)
	if strings.Contains(string(r2.Body), "secret") {
		t.Fatalf("a given secret comes back: %s", r2.Body)
	}
	suSignsWith(t, s, "default", id2, given)
	if got := suSecret(t, base, id2); got != given {
		t.Fatal("the secret route does not answer the secret given at creation")
	}
	l := get(t, base+"/subscriptions?limit=1")
	auExpect(t, "list", l, 200, "")
	var page struct {
		Subscriptions []map[string]any `json:"subscriptions"`
		Next          string           `json:"next"`
	}
	_ = json.Unmarshal(l.Body, &page)
	all := get(t, base+"/subscriptions?after="+page.Next)
	if len(page.Subscriptions) != 1 || page.Next == "" || !strings.Contains(string(all.Body), `"subscriptions":[{`) ||
		strings.Contains(string(l.Body)+string(all.Body), "secret") {
		t.Fatalf("list pages: %s then %s", l.Body, all.Body)
	}

	// Rotation: a generated secret, not in the answer but on the secret
	// route; both sign until the overlap ends.
	before := time.Now()
	rot := postJSON(t, base+"/subscriptions/"+id+"/secret", map[string]any{})
	auExpect(t, "rotate", rot, 200, "")
	var rb map[string]string
	_ = json.Unmarshal(rot.Body, &rb)
	until, err := time.Parse(time.RFC3339Nano, rb["previousSecretValidUntil"])
	if err != nil || rb["id"] != id || len(rb) != 2 ||
		until.Before(before.Add(24*time.Hour)) || until.After(time.Now().Add(24*time.Hour)) {
		t.Fatalf("rotation answer: %s", rot.Body)
	}
	rotated := suSecret(t, base, id)
	if !strings.HasPrefix(rotated, "whsec_") || rotated == generated {
		t.Fatal("after a rotation the secret route does not answer a new generated secret")
	}
	suSignsWith(t, s, "default", id, rotated, generated)
	third := strings.Repeat("r", 40)
	rot2 := postJSON(t, base+"/subscriptions/"+id+"/secret", map[string]any{"secret": third})
	auExpect(t, "rotate with a secret", rot2, 200, "")
	if strings.Contains(string(rot2.Body), third) || strings.Contains(string(rot2.Body), `"webhook"`) {
		t.Fatalf("a given secret comes back: %s", rot2.Body)
	}
	suSignsWith(t, s, "default", id, third, rotated)
	if got := suSecret(t, base, id); got != third {
		t.Fatal("the secret route does not answer the secret rotated to")
	}
	if g := get(t, base+"/subscriptions/"+id).JSON(t); g["status"] != "active" || g["updatedAt"] == g["createdAt"] {
		t.Fatalf("after rotations: %v", g)
	}

	auExpect(t, "enable an active one", do(t, "POST", base+"/subscriptions/"+id+"/enable", "", nil), 409, "SUBSCRIPTION_ALREADY_ACTIVE")
	auExpect(t, "delete", do(t, "DELETE", base+"/subscriptions/"+id, "", nil), 204, "")
	auExpect(t, "get deleted", get(t, base+"/subscriptions/"+id), 404, "SUBSCRIPTION_NOT_FOUND")
	auExpect(t, "delete deleted", do(t, "DELETE", base+"/subscriptions/"+id, "", nil), 404, "SUBSCRIPTION_NOT_FOUND")
	auExpect(t, "rotate deleted", postJSON(t, base+"/subscriptions/"+id+"/secret", map[string]any{}), 404, "SUBSCRIPTION_NOT_FOUND")
	auExpect(t, "the secret of a deleted one", get(t, base+"/subscriptions/"+id+"/secret"), 404, "SUBSCRIPTION_NOT_FOUND")
	auExpect(t, "the secret of an unknown one", get(t, base+"/subscriptions/no-such-subscription/secret"), 404, "SUBSCRIPTION_NOT_FOUND")
	auExpect(t, "enable deleted", do(t, "POST", base+"/subscriptions/"+id+"/enable", "", nil), 404, "SUBSCRIPTION_NOT_FOUND")
	auExpect(t, "get unknown", get(t, base+"/subscriptions/no-such-subscription"), 404, "SUBSCRIPTION_NOT_FOUND")
	suSecretErased(t, s, "default", id)
	suSignsWith(t, s, "default", id2, given)
	if l := get(t, base+"/subscriptions").JSON(t); len(l["subscriptions"].([]any)) != 1 {
		t.Fatalf("after the delete: %v", l)
	}
}

// TestSubscriptionRequestRules: a body that breaks a rule is a 400 listing
// every violation at its path, and creates nothing; a secret in it is never
// quoted back; a URL agentbus may not deliver to is WEBHOOK_URL_REJECTED
// with the reason; an unknown service is SERVICE_NOT_FOUND.
func TestSubscriptionRequestRules(t *testing.T) {
	t.Parallel()
	s := start(t, suLoopback)
	hook := suReceiver(t)
	types := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("Type%d", i)
		}
		return out
	}
	badSecret := "short-secret-SHOWN-NOWHERE"[:20]
	cases := []struct {
		name   string
		body   string
		status int
		code   string
		paths  []string
	}{
		{"no webhook", `{}`, 400, "VALIDATION_FAILED", []string{"$"}},
		{"webhook not an object", `{"webhook":"` + hook + `"}`, 400, "VALIDATION_FAILED", []string{"$.webhook"}},
		{"no url", `{"webhook":{}}`, 400, "VALIDATION_FAILED", []string{"$.webhook"}},
		{"url too long", `{"webhook":{"url":"` + hook + "?" + strings.Repeat("q", 2048) + `"}}`, 400, "VALIDATION_FAILED", []string{"$.webhook.url"}},
		{"unknown top-level property", `{"webhook":{"url":"` + hook + `"},"colour":"red"}`, 400, "VALIDATION_FAILED", []string{"$.colour"}},
		{"unknown webhook property", `{"webhook":{"url":"` + hook + `","headers":{}}}`, 400, "VALIDATION_FAILED", []string{"$.webhook"}},
		{"a property twice", `{"webhook":{"url":"` + hook + `"},"webhook":{"url":"` + hook + `"}}`, 400, "VALIDATION_FAILED", []string{"$.webhook"}},
		{"a secret twice", `{"webhook":{"url":"` + hook + `","secret":"` + strings.Repeat("a", 30) + `","secret":"` + strings.Repeat("b", 30) + `"}}`, 400, "VALIDATION_FAILED", []string{"$.webhook.secret"}},
		{"secret too short", `{"webhook":{"url":"` + hook + `","secret":"` + badSecret + `"}}`, 400, "VALIDATION_FAILED", []string{"$.webhook.secret"}},
		{"secret not a string", `{"webhook":{"url":"` + hook + `","secret":12345}}`, 400, "VALIDATION_FAILED", []string{"$.webhook.secret"}},
		{"whsec secret not base64", `{"webhook":{"url":"` + hook + `","secret":"whsec_***not*base64*at*all***"}}`, 400, "VALIDATION_FAILED", []string{"$.webhook.secret"}},
		{"whsec secret of 16 bytes", `{"webhook":{"url":"` + hook + `","secret":"whsec_` + base64.StdEncoding.EncodeToString(make([]byte, 16)) + `"}}`, 400, "VALIDATION_FAILED", []string{"$.webhook.secret"}},
		{"type not PascalCase", `{"webhook":{"url":"` + hook + `"},"filter":{"types":["orderPlaced"]}}`, 400, "VALIDATION_FAILED", []string{"$.filter.types.0"}},
		{"type with a dot", `{"webhook":{"url":"` + hook + `"},"filter":{"types":["Order.Placed"]}}`, 400, "VALIDATION_FAILED", []string{"$.filter.types.0"}},
		{"type wildcard", `{"webhook":{"url":"` + hook + `"},"filter":{"types":["*"]}}`, 400, "VALIDATION_FAILED", []string{"$.filter.types.0"}},
		{"type too long", `{"webhook":{"url":"` + hook + `"},"filter":{"types":["A` + strings.Repeat("b", 128) + `"]}}`, 400, "VALIDATION_FAILED", []string{"$.filter.types.0"}},
		{"no types", `{"webhook":{"url":"` + hook + `"},"filter":{"types":[]}}`, 400, "VALIDATION_FAILED", []string{"$.filter.types"}},
		{"a type twice", `{"webhook":{"url":"` + hook + `"},"filter":{"types":["A","A"]}}`, 400, "VALIDATION_FAILED", []string{"$.filter.types"}},
		{"101 types", string(plJSON(t, suBody(hook, types(101), nil))), 400, "VALIDATION_FAILED", []string{"$.filter.types"}},
		{"filter without types", `{"webhook":{"url":"` + hook + `"},"filter":{}}`, 400, "VALIDATION_FAILED", []string{"$.filter"}},
		{"bad service id", `{"serviceId":"a/b","webhook":{"url":"` + hook + `"}}`, 400, "VALIDATION_FAILED", []string{"$.serviceId"}},
		{"not JSON", `{"webhook":`, 400, "MALFORMED_JSON", nil},
		{"ftp URL", `{"webhook":{"url":"ftp://127.0.0.1/hook"}}`, 400, "WEBHOOK_URL_REJECTED", nil},
		{"relative URL", `{"webhook":{"url":"/hook"}}`, 400, "WEBHOOK_URL_REJECTED", nil},
		{"URL with a password", `{"webhook":{"url":"http://user:pw@127.0.0.1/hook"}}`, 400, "WEBHOOK_URL_REJECTED", nil},
		{"URL with a fragment", `{"webhook":{"url":"` + hook + `#part"}}`, 400, "WEBHOOK_URL_REJECTED", nil},
		{"URL with a space", `{"webhook":{"url":"http://127.0.0.1/a hook"}}`, 400, "WEBHOOK_URL_REJECTED", nil},
		{"unknown service", `{"serviceId":"no-such-service","webhook":{"url":"` + hook + `"}}`, 404, "SERVICE_NOT_FOUND", nil},
		{"100 types", string(plJSON(t, suBody(hook, types(100), nil))), 201, "", nil},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := do(t, "POST", s.URL+"/subscriptions", "application/json", []byte(tt.body))
			if strings.Contains(string(r.Body), badSecret) || strings.Contains(string(r.Body), strings.Repeat("a", 30)) {
				t.Fatalf("the answer quotes the secret: %s", r.Body)
			}
			if tt.status == 201 {
				suCreated(t, tt.name, r)
				return
			}
			e := plError(t, r, tt.status, tt.code)
			for _, p := range tt.paths {
				if !strings.Contains(strings.Join(e.paths(), " "), p) {
					t.Fatalf("no violation at %s: %s", p, r.Body)
				}
			}
			if tt.code == "WEBHOOK_URL_REJECTED" && !strings.Contains(string(r.Body), `"reason":`) {
				t.Fatalf("no reason in details: %s", r.Body)
			}
		})
	}
	t.Run("rotation bodies", func(t *testing.T) {
		t.Parallel()
		id := suCreated(t, "create", postJSON(t, s.URL+"/subscriptions", suBody(hook, []string{suNever}, nil)))["id"].(string)
		for body, path := range map[string]string{
			`{"secret":"` + badSecret + `"}`: "$.secret",
			`{"secret":42}`:                  "$.secret",
			`{"secret":"` + strings.Repeat("x", 30) + `","other":1}`:                                  "$.other",
			`{"secret":"` + strings.Repeat("x", 30) + `","secret":"` + strings.Repeat("y", 30) + `"}`: "$.secret",
		} {
			r := postJSON(t, s.URL+"/subscriptions/"+id+"/secret", []byte(body))
			e := plError(t, r, 400, "VALIDATION_FAILED")
			if !strings.Contains(strings.Join(e.paths(), " "), path) || strings.Contains(string(r.Body), badSecret) || strings.Contains(string(r.Body), strings.Repeat("x", 30)) {
				t.Fatalf("%s: %s", body, r.Body)
			}
		}
		if l := get(t, s.URL+"/subscriptions/"+id).JSON(t); l["updatedAt"] != l["createdAt"] {
			t.Fatalf("a refused rotation changed the subscription: %v", l)
		}
	})
}

// TestSubscriptionSecretNeverShown: the secrets of subscriptions created
// and rotated over REST and as commands through POST /commands — given,
// generated, and refused as invalid — appear nowhere but in the answers
// of GET /subscriptions/{id}/secret: not in any other answer (the 201 of a
// creation, a rotation's 200, records, lists, events, traces, errors), not
// in any message of any stream or bucket in NATS (command and event logs
// included; the secrets bucket holds them encrypted), and not in
// agentbus's log at debug level, the secret route's own calls included.
func TestSubscriptionSecretNeverShown(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NATSServer(t)
	logs := &testkit.LockedBuffer{}
	debug := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := testkit.AgentbusWithLogger(t, debug, testkit.NoNATSPort, suLoopback,
		func(c *settings.Config) { c.NATS.URL = natsURL })
	js := testkit.JetStream(t, natsURL)
	base, hook := s.URL, suReceiver(t)
	var shown []string // every secret, to look for
	var answers []string
	keep := func(r *response) *response { answers = append(answers, string(r.Body)); return r }

	restGiven := "whsec_" + base64.StdEncoding.EncodeToString([]byte("rest-given-secret-32-bytes-long!"))
	rec := suCreated(t, "REST, given", keep(postJSON(t, base+"/subscriptions", suWithSecret(hook, restGiven, []string{suNever}))))
	idGiven := rec["id"].(string)
	idGen := suCreated(t, "REST, generated", keep(postJSON(t, base+"/subscriptions", suBody(hook, []string{suNever}, nil))))["id"].(string)
	restGenerated := suSecret(t, base, idGen)
	if suSecret(t, base, idGiven) != restGiven {
		t.Fatal("the secret route does not answer the secret given")
	}
	rotGiven := strings.Repeat("R", 12) + "-rotated-over-rest"
	auExpect(t, "rotate, given", keep(postJSON(t, base+"/subscriptions/"+idGiven+"/secret", map[string]any{"secret": rotGiven})), 200, "")
	auExpect(t, "rotate, generated", keep(postJSON(t, base+"/subscriptions/"+idGen+"/secret", map[string]any{})), 200, "")
	rotGenerated := suSecret(t, base, idGen)
	if rotGenerated == restGenerated {
		t.Fatal("the secret route answers the secret a rotation replaced")
	}

	cmdSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("command-secret-of-32-bytes-long!"))
	env := command("CreateSubscription", "create-subscription/1.0", suWithSecret(hook, cmdSecret, []string{suNever}))
	idCmd := submitCommand(t, base, env)
	if code := suRejection(t, base, idCmd); code != "" {
		t.Fatalf("CreateSubscription through POST /commands rejected: %s", code)
	}
	testkit.Eventually(t, "the subscription of the command", func() bool { return get(t, base+"/subscriptions/"+idCmd).Status == 200 })
	suSignsWith(t, s, "default", idCmd, cmdSecret)
	if suSecret(t, base, idCmd) != cmdSecret {
		t.Fatal("the secret route does not answer the secret a command gave")
	}
	keep(postJSON(t, base+"/commands", env)) // the same command again: the same id, nothing new
	cmdRotSecret := strings.Repeat("C", 10) + "-rotated-by-a-command"
	firstRotation := command("RotateSubscriptionSecret", "rotate-subscription-secret/1.0",
		map[string]any{"id": idCmd, "secret": cmdRotSecret})
	rotCorr := submitCommand(t, base, firstRotation)
	if code := suRejection(t, base, rotCorr); code != "" {
		t.Fatalf("RotateSubscriptionSecret through POST /commands rejected: %s", code)
	}
	suSignsWith(t, s, "default", idCmd, cmdRotSecret, cmdSecret)
	// A second rotation, then the first one again (a client's retry): the
	// retry is accepted before, and must not set its secret back.
	cmdRotAgain := strings.Repeat("D", 10) + "-rotated-again-by-cmd"
	hiddenCased := strings.Repeat("H", 10) + "-under-another-casing"
	rot2 := submitCommand(t, base, command("RotateSubscriptionSecret", "rotate-subscription-secret/1.0",
		map[string]any{"id": idCmd, "secret": cmdRotAgain, "Secret": hiddenCased}))
	if code := suRejection(t, base, rot2); code != "" {
		t.Fatalf("the second rotation rejected: %s", code)
	}
	suSignsWith(t, s, "default", idCmd, cmdRotAgain, cmdRotSecret)
	keep(postJSON(t, base+"/commands", firstRotation))
	suSignsWith(t, s, "default", idCmd, cmdRotAgain, cmdRotSecret)

	refused := strings.Repeat("z", 23) // one short
	keep(postJSON(t, base+"/subscriptions", suWithSecret(hook, refused, nil)))
	keep(postJSON(t, base+"/commands", command("CreateSubscription", "create-subscription/1.0", suWithSecret(hook, refused, nil))))
	keep(postJSON(t, base+"/subscriptions/"+idGen+"/secret", map[string]any{"secret": refused}))
	noSecret := keep(postJSON(t, base+"/commands", command("CreateSubscription", "create-subscription/1.0", suBody(hook, nil, nil))))
	if e := plError(t, noSecret, 400, "VALIDATION_FAILED"); !strings.Contains(strings.Join(e.paths(), " "), "$.data.webhook.secret") {
		t.Fatalf("CreateSubscription without a secret through POST /commands: %s", noSecret.Body)
	}
	shown = append(shown, restGiven, restGenerated, rotGiven, rotGenerated, cmdSecret, cmdRotSecret, cmdRotAgain, hiddenCased, refused)

	// Every answer a reader can get.
	for _, p := range []string{"/subscriptions", "/subscriptions/" + idGiven, "/subscriptions/" + idGen, "/subscriptions/" + idCmd,
		"/traces/" + idCmd, "/traces/" + rotCorr} {
		keep(get(t, base+p))
	}
	for _, ev := range plWalk(t, s, nil, 1000) {
		answers = append(answers, string(plJSON(t, ev)))
	}
	testkit.WaitIdle(t, js, testkit.PipelineConsumers("AGENTBUS_EVENTS/subscriptions")...)
	stored := suAllMessages(t, js)
	if len(stored) == 0 {
		t.Fatal("read no message from NATS")
	}
	logged := logs.String()
	if !strings.Contains(logged, "level=DEBUG") && !strings.Contains(logged, "level=INFO") {
		t.Fatalf("the logger captured nothing: %q", logged)
	}
	for i, secret := range shown {
		forms := []string{secret}
		if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
			forms = append(forms, rest, base64.RawStdEncoding.EncodeToString(secrets.SigningKey(secret)))
		}
		for _, form := range forms {
			for _, a := range answers {
				if strings.Contains(a, form) {
					t.Errorf("secret %d is in an answer: %s", i, a)
				}
			}
			for _, m := range stored {
				if strings.Contains(m, form) {
					t.Errorf("secret %d is stored in clear in NATS: %s", i, m)
				}
			}
			if strings.Contains(logged, form) {
				t.Errorf("secret %d is in the log", i)
			}
		}
	}
}

// TestGeneratedSecretNotShownWhenQueued: when the outcome takes longer
// than registry.waitTimeout (here: no replica processes commands),
// creating a subscription answers 202 with the trace's Location and no
// secret; the secret route answers 404 until the subscription exists.
func TestGeneratedSecretNotShownWhenQueued(t *testing.T) {
	t.Parallel()
	s := start(t, suLoopback, func(c *settings.Config) {
		c.Processor.Disabled = true
		c.Registry.WaitTimeout = settings.Duration(200 * time.Millisecond)
	})
	r := postJSON(t, s.URL+"/subscriptions", suBody(suReceiver(t), []string{suNever}, nil))
	auExpect(t, "create", r, 202, "")
	var body map[string]string
	_ = json.Unmarshal(r.Body, &body)
	if body["id"] == "" || body["status"] != "accepted" || len(body) != 2 || !strings.HasSuffix(r.Header.Get("Location"), "/traces/"+body["id"]) {
		t.Fatalf("queued creation: %s", r.Body)
	}
	keys, err := suSigning(t, s, "default", body["id"])
	if err != nil || len(keys) != 1 {
		t.Fatalf("the generated secret is not stored: %d keys, %v", len(keys), err)
	}
	auExpect(t, "the secret before the subscription exists", get(t, s.URL+"/subscriptions/"+body["id"]+"/secret"), 404, "SUBSCRIPTION_NOT_FOUND")
}
